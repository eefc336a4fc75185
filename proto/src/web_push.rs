//! Web push subscriptions (a browser's `PushSubscription`, RFC 8030 / 8291):
//! what a registration of platform `web` carries, the rules it is checked
//! against, and the allow-list of push-service hosts Clarion may post to
//! (`CLARION_WEBPUSH_ALLOWED_HOSTS`), so a registration cannot make Clarion
//! post to any URL.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde::{Deserialize, Serialize};

/// Length of the subscription's P-256 public key, uncompressed (RFC 8291 §3.1).
pub const P256DH_BYTES: usize = 65;
/// Length of the subscription's authentication secret (RFC 8291 §3.2).
pub const AUTH_BYTES: usize = 16;
/// Longest endpoint URL accepted.
pub const MAX_ENDPOINT_BYTES: usize = 2048;

/// The push services of the major browsers, allowed when
/// `CLARION_WEBPUSH_ALLOWED_HOSTS` is not set: Chrome and the other
/// Chromium browsers (FCM), Firefox (Mozilla autopush), Safari (Apple) and
/// Edge (Microsoft WNS).
pub const DEFAULT_ALLOWED_HOSTS: &str =
    "fcm.googleapis.com,updates.push.services.mozilla.com,web.push.apple.com,*.notify.windows.com";

/// Base64url as browsers write it: no padding, though padding is accepted.
const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A browser's push subscription, as `PushSubscription.toJSON()` gives it
/// (its `expirationTime`, if any, is not kept).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebSubscription {
    /// The push service's URL for this subscription (`https` only).
    pub endpoint: String,
    pub keys: WebSubscriptionKeys,
}

/// The subscription's keys, base64url.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebSubscriptionKeys {
    /// The browser's P-256 public key, 65 bytes uncompressed.
    pub p256dh: String,
    /// The authentication secret, 16 bytes.
    pub auth: String,
}

/// Why a subscription was refused; [`SubscriptionError::field`] names the
/// field (a 422 names it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubscriptionError {
    #[error("a web registration needs `subscription` (the browser's PushSubscription)")]
    Missing,
    #[error("`subscription` applies to web registrations only")]
    NotWeb,
    #[error("subscription.endpoint is not a URL: {0}")]
    EndpointNotUrl(String),
    #[error("subscription.endpoint must be an https URL")]
    EndpointNotHttps,
    #[error("subscription.endpoint is {0} bytes; the limit is {MAX_ENDPOINT_BYTES}")]
    EndpointTooLong(usize),
    #[error(
        "subscription.endpoint's host {0:?} is not an allowed push service (CLARION_WEBPUSH_ALLOWED_HOSTS)"
    )]
    HostNotAllowed(String),
    #[error("subscription.keys.p256dh is not base64url")]
    P256dhNotBase64,
    #[error("subscription.keys.p256dh is {0} bytes; an uncompressed P-256 public key is {P256DH_BYTES}")]
    P256dhLength(usize),
    #[error("subscription.keys.p256dh is not a point on P-256")]
    P256dhNotOnCurve,
    #[error("subscription.keys.auth is not base64url")]
    AuthNotBase64,
    #[error("subscription.keys.auth is {0} bytes; it must be {AUTH_BYTES}")]
    AuthLength(usize),
}

impl SubscriptionError {
    /// The field refused, as the request spells it.
    pub fn field(&self) -> &'static str {
        match self {
            SubscriptionError::Missing | SubscriptionError::NotWeb => "subscription",
            SubscriptionError::EndpointNotUrl(_)
            | SubscriptionError::EndpointNotHttps
            | SubscriptionError::EndpointTooLong(_)
            | SubscriptionError::HostNotAllowed(_) => "subscription.endpoint",
            SubscriptionError::P256dhNotBase64
            | SubscriptionError::P256dhLength(_)
            | SubscriptionError::P256dhNotOnCurve => "subscription.keys.p256dh",
            SubscriptionError::AuthNotBase64 | SubscriptionError::AuthLength(_) => "subscription.keys.auth",
        }
    }
}

impl WebSubscription {
    /// Checks every rule: an `https` endpoint on an allowed host, a key
    /// that decodes as an uncompressed point on P-256, a 16-byte secret.
    pub fn validate(&self, allowed: &AllowedHosts) -> Result<(), SubscriptionError> {
        if self.endpoint.len() > MAX_ENDPOINT_BYTES {
            return Err(SubscriptionError::EndpointTooLong(self.endpoint.len()));
        }
        let host = endpoint_host(&self.endpoint)?;
        if !allowed.permits(&host) {
            return Err(SubscriptionError::HostNotAllowed(host));
        }
        self.public_key()?;
        self.auth_secret()?;
        Ok(())
    }

    /// The browser's public key, checked to be a point on P-256 (the
    /// uncompressed SEC 1 bytes).
    pub fn public_key(&self) -> Result<[u8; P256DH_BYTES], SubscriptionError> {
        let bytes = BASE64URL
            .decode(&self.keys.p256dh)
            .map_err(|_| SubscriptionError::P256dhNotBase64)?;
        let key: [u8; P256DH_BYTES] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| SubscriptionError::P256dhLength(bytes.len()))?;
        // 0x04 is the uncompressed form; the rest must lie on the curve.
        if key[0] != 0x04 || p256::PublicKey::from_sec1_bytes(&key).is_err() {
            return Err(SubscriptionError::P256dhNotOnCurve);
        }
        Ok(key)
    }

    /// The authentication secret.
    pub fn auth_secret(&self) -> Result<[u8; AUTH_BYTES], SubscriptionError> {
        let bytes = BASE64URL
            .decode(&self.keys.auth)
            .map_err(|_| SubscriptionError::AuthNotBase64)?;
        bytes
            .as_slice()
            .try_into()
            .map_err(|_| SubscriptionError::AuthLength(bytes.len()))
    }
}

/// The host of an `https` endpoint, lower case.
pub fn endpoint_host(endpoint: &str) -> Result<String, SubscriptionError> {
    let url = url::Url::parse(endpoint).map_err(|err| SubscriptionError::EndpointNotUrl(err.to_string()))?;
    if url.scheme() != "https" {
        return Err(SubscriptionError::EndpointNotHttps);
    }
    match url.host_str() {
        Some(host) if !host.is_empty() => Ok(host.to_ascii_lowercase()),
        _ => Err(SubscriptionError::EndpointNotUrl("no host".into())),
    }
}

/// Base64url without padding, as web push writes keys and secrets.
pub fn base64url(bytes: &[u8]) -> String {
    BASE64URL.encode(bytes)
}

/// Decodes base64url, padded or not.
pub fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    BASE64URL.decode(text).ok()
}

/// The push-service hosts Clarion may post to: comma-separated host names
/// (any port), `*.example.com` for the subdomains of `example.com`, or `*`
/// for any host (tests, mocks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowedHosts {
    Any,
    Only(Vec<HostPattern>),
}

/// One entry of [`AllowedHosts`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    Exact(String),
    /// The subdomains of this domain (not the domain itself).
    SubdomainsOf(String),
}

impl AllowedHosts {
    /// True when Clarion may post to `host`.
    pub fn permits(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        match self {
            AllowedHosts::Any => true,
            AllowedHosts::Only(patterns) => patterns.iter().any(|pattern| match pattern {
                HostPattern::Exact(name) => host == *name,
                HostPattern::SubdomainsOf(domain) => host
                    .strip_suffix(domain.as_str())
                    .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
            }),
        }
    }
}

impl Default for AllowedHosts {
    fn default() -> Self {
        DEFAULT_ALLOWED_HOSTS
            .parse()
            .unwrap_or(AllowedHosts::Only(Vec::new()))
    }
}

/// Why an allow-list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowedHostsError {
    #[error("the allow-list of push-service hosts is empty; `*` allows any host")]
    Empty,
    #[error("{0:?} is not a host name (`host`, `*.domain` or `*`)")]
    NotAHost(String),
}

impl FromStr for AllowedHosts {
    type Err = AllowedHostsError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let entries: Vec<&str> = text.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
        if entries.is_empty() {
            return Err(AllowedHostsError::Empty);
        }
        if entries.contains(&"*") {
            return Ok(AllowedHosts::Any);
        }
        let mut patterns = Vec::with_capacity(entries.len());
        for entry in entries {
            let lower = entry.to_ascii_lowercase();
            let (pattern, name) = match lower.strip_prefix("*.") {
                Some(domain) => (HostPattern::SubdomainsOf(domain.to_owned()), domain.to_owned()),
                None => (HostPattern::Exact(lower.clone()), lower.clone()),
            };
            let plausible = !name.is_empty()
                && name.split('.').all(|label| {
                    !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                });
            if !plausible {
                return Err(AllowedHostsError::NotAHost(entry.to_owned()));
            }
            patterns.push(pattern);
        }
        Ok(AllowedHosts::Only(patterns))
    }
}

impl fmt::Display for AllowedHosts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllowedHosts::Any => f.write_str("*"),
            AllowedHosts::Only(patterns) => {
                let names: Vec<String> = patterns
                    .iter()
                    .map(|pattern| match pattern {
                        HostPattern::Exact(name) => name.clone(),
                        HostPattern::SubdomainsOf(domain) => format!("*.{domain}"),
                    })
                    .collect();
                f.write_str(&names.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key pair from RFC 8291's example (§5): the receiver's public key.
    const P256DH: &str =
        "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
    const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";

    fn subscription(endpoint: &str, p256dh: &str, auth: &str) -> WebSubscription {
        WebSubscription {
            endpoint: endpoint.into(),
            keys: WebSubscriptionKeys {
                p256dh: p256dh.into(),
                auth: auth.into(),
            },
        }
    }

    #[test]
    fn a_browser_subscription_to_an_allowed_service_is_accepted() {
        let good = subscription("https://fcm.googleapis.com/fcm/send/abc:def", P256DH, AUTH);
        assert_eq!(good.validate(&AllowedHosts::default()), Ok(()));
        let json = r#"{"endpoint":"https://updates.push.services.mozilla.com/wpush/v2/x","expirationTime":null,
                       "keys":{"p256dh":"BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4","auth":"BTBZMqHH6r4Tts7J_aSIgg"}}"#;
        let parsed: WebSubscription = serde_json::from_str(json).unwrap();
        assert_eq!(parsed.validate(&AllowedHosts::default()), Ok(()));
    }

    #[test]
    fn each_refusal_names_its_field() {
        let allowed = AllowedHosts::default();
        let mut off_curve = base64url_decode(P256DH).unwrap();
        off_curve[64] ^= 1;
        for (sub, field) in [
            (
                subscription("http://fcm.googleapis.com/x", P256DH, AUTH),
                "subscription.endpoint",
            ),
            (subscription("not a url", P256DH, AUTH), "subscription.endpoint"),
            (
                subscription("https://evil.example/x", P256DH, AUTH),
                "subscription.endpoint",
            ),
            (
                subscription("https://fcm.googleapis.com/x", "!!", AUTH),
                "subscription.keys.p256dh",
            ),
            (
                subscription("https://fcm.googleapis.com/x", &P256DH[..40], AUTH),
                "subscription.keys.p256dh",
            ),
            (
                subscription("https://fcm.googleapis.com/x", &base64url(&off_curve), AUTH),
                "subscription.keys.p256dh",
            ),
            (
                subscription("https://fcm.googleapis.com/x", P256DH, "AAAA"),
                "subscription.keys.auth",
            ),
            (
                subscription("https://fcm.googleapis.com/x", P256DH, "*"),
                "subscription.keys.auth",
            ),
        ] {
            let err = sub.validate(&allowed).unwrap_err();
            assert_eq!(err.field(), field, "{sub:?}: {err}");
            assert!(err.to_string().starts_with(field), "{err}");
        }
    }

    #[test]
    fn the_allow_list_matches_hosts_and_subdomains() {
        let allowed = AllowedHosts::default();
        assert!(allowed.permits("fcm.googleapis.com"));
        assert!(allowed.permits("WEB.push.apple.com"));
        assert!(allowed.permits("wns2-db5p.notify.windows.com"));
        assert!(!allowed.permits("notify.windows.com"));
        assert!(!allowed.permits("evilnotify.windows.com"));
        assert!(!allowed.permits("fcm.googleapis.com.evil.example"));
        assert!("*".parse::<AllowedHosts>().unwrap().permits("127.0.0.1"));
        let custom: AllowedHosts = "push.example.com, *.example.org".parse().unwrap();
        assert!(custom.permits("push.example.com"));
        assert!(custom.permits("a.b.example.org"));
        assert!(!custom.permits("fcm.googleapis.com"));
        assert_eq!(custom.to_string(), "push.example.com,*.example.org");
        assert_eq!("".parse::<AllowedHosts>(), Err(AllowedHostsError::Empty));
        assert!(matches!(
            "a b".parse::<AllowedHosts>(),
            Err(AllowedHostsError::NotAHost(_))
        ));
        assert!(matches!(
            "*.".parse::<AllowedHosts>(),
            Err(AllowedHostsError::NotAHost(_))
        ));
    }
}
