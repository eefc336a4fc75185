//! Checking VAPID (RFC 8292) as a push service does:
//! `Authorization: vapid t=<JWT>, k=<public key>`, the JWT signed ES256 by
//! the key `k` names (verified with aws-lc-rs, not the `jsonwebtoken` crate
//! the dispatcher signs with), its `aud` the push service's origin, its
//! `exp` in the future and at most 24 hours ahead, a `sub` to contact.

use std::sync::Mutex;

use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
use clarion_proto::web_push::base64url_decode;
use serde::Deserialize;

use crate::mocks::unix_s;

/// RFC 8292 §2: `exp` no more than 24 hours after the request.
const MAX_LIFETIME_S: u64 = 24 * 3600;
/// Clock skew tolerated between the sender and the mock.
const CLOCK_SKEW_S: u64 = 60;

/// Why the credentials were refused (the 401's message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VapidError {
    #[error("no Authorization header with the vapid scheme")]
    Scheme,
    #[error("the vapid t= or k= parameter is missing")]
    Parameters,
    #[error("k is not an uncompressed P-256 public key in base64url")]
    Key,
    #[error("t is not a JWT")]
    Malformed,
    #[error("the JWT is not ES256")]
    Algorithm,
    #[error("the JWT's signature does not verify with k")]
    Signature,
    #[error("aud is not this push service's origin")]
    Audience,
    #[error("exp is past, or more than 24 hours ahead")]
    Expiry,
    #[error("sub is missing or not a mailto: or https: contact")]
    Subject,
}

/// What a valid `Authorization` header proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vapid {
    /// `k`: the application server's public key, uncompressed.
    pub public_key: Vec<u8>,
    pub subject: String,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
}

#[derive(Deserialize)]
struct Claims {
    aud: String,
    exp: u64,
    #[serde(default)]
    sub: Option<String>,
}

/// The JWT and key of `vapid t=…, k=…` (parameters in either order).
fn parameters(header: &str) -> Result<(&str, &str), VapidError> {
    let (scheme, rest) = header.trim().split_once(' ').ok_or(VapidError::Scheme)?;
    if !scheme.eq_ignore_ascii_case("vapid") {
        return Err(VapidError::Scheme);
    }
    let (mut token, mut key) = (None, None);
    for parameter in rest.split(',') {
        match parameter.trim().split_once('=') {
            Some(("t", value)) => token = Some(value.trim()),
            Some(("k", value)) => key = Some(value.trim()),
            _ => {}
        }
    }
    token.zip(key).ok_or(VapidError::Parameters)
}

/// A JWT segment as JSON.
fn segment<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, VapidError> {
    let bytes = base64url_decode(text).ok_or(VapidError::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| VapidError::Malformed)
}

/// Checks `header` for a push service whose origin is `origin`.
pub fn check(header: Option<&str>, origin: &str) -> Result<Vapid, VapidError> {
    verify(header, origin).map(|(vapid, _)| vapid)
}

/// The last `Authorization` header that verified, what it proved and its
/// `exp`: a sender signs one JWT per push service and reuses it for hours,
/// so the mock, like a push service under load, verifies the signature
/// once per JWT rather than once per push. Any other header is verified in
/// full (and becomes the one remembered).
#[derive(Default)]
pub struct VerifiedCache {
    last: Mutex<Option<(String, Vapid, u64)>>,
}

impl VerifiedCache {
    pub fn check(&self, header: Option<&str>, origin: &str) -> Result<Vapid, VapidError> {
        let text = header.ok_or(VapidError::Scheme)?;
        {
            let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((known, vapid, exp)) = last.as_ref()
                && known == text
                && exp + CLOCK_SKEW_S > unix_s()
            {
                return Ok(vapid.clone());
            }
        }
        let (vapid, exp) = verify(header, origin)?;
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((text.to_owned(), vapid.clone(), exp));
        Ok(vapid)
    }
}

/// What `header` proves, and its JWT's `exp`.
fn verify(header: Option<&str>, origin: &str) -> Result<(Vapid, u64), VapidError> {
    let (jwt, key) = parameters(header.ok_or(VapidError::Scheme)?)?;
    let public_key = base64url_decode(key)
        .filter(|key| key.len() == 65 && key[0] == 0x04)
        .ok_or(VapidError::Key)?;
    let segments: Vec<&str> = jwt.split('.').collect();
    let [header, claims, signature] = segments.as_slice() else {
        return Err(VapidError::Malformed);
    };
    if segment::<Header>(header)?.alg != "ES256" {
        return Err(VapidError::Algorithm);
    }
    let signature = base64url_decode(signature).ok_or(VapidError::Malformed)?;
    let signed = &jwt[..header.len() + 1 + claims.len()];
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &public_key)
        .verify(signed.as_bytes(), &signature)
        .map_err(|_| VapidError::Signature)?;
    let claims: Claims = segment(claims)?;
    if claims.aud != origin {
        return Err(VapidError::Audience);
    }
    let now = unix_s();
    if claims.exp + CLOCK_SKEW_S <= now || claims.exp > now + MAX_LIFETIME_S + CLOCK_SKEW_S {
        return Err(VapidError::Expiry);
    }
    let subject = claims
        .sub
        .filter(|sub| sub.starts_with("mailto:") || sub.starts_with("https:"))
        .ok_or(VapidError::Subject)?;
    Ok((Vapid { public_key, subject }, claims.exp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
    use clarion_proto::web_push::base64url;
    use serde_json::json;

    fn jwt(key: &EcdsaKeyPair, alg: &str, claims: serde_json::Value) -> String {
        let signed = format!(
            "{}.{}",
            base64url(json!({"typ": "JWT", "alg": alg}).to_string().as_bytes()),
            base64url(claims.to_string().as_bytes())
        );
        let signature = key.sign(&SystemRandom::new(), signed.as_bytes()).unwrap();
        format!("{signed}.{}", base64url(signature.as_ref()))
    }

    #[test]
    fn a_jwt_is_checked_for_signature_audience_expiry_and_subject() {
        let key = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
        let other = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
        let k = base64url(key.public_key().as_ref());
        let origin = "https://127.0.0.1:4433";
        let now = unix_s();
        let good = json!({"aud": origin, "exp": now + 3600, "sub": "mailto:desk@news.example"});
        let header = |jwt: String| format!("vapid t={jwt}, k={k}");
        let vapid = check(Some(&header(jwt(&key, "ES256", good.clone()))), origin).unwrap();
        assert_eq!(vapid.public_key, key.public_key().as_ref());
        assert_eq!(vapid.subject, "mailto:desk@news.example");
        let refused = |value: String| check(Some(&value), origin).unwrap_err();
        assert_eq!(
            refused(header(jwt(&other, "ES256", good.clone()))),
            VapidError::Signature
        );
        assert_eq!(refused(header(jwt(&key, "ES384", good))), VapidError::Algorithm);
        for (claims, error) in [
            (
                json!({"aud": "https://elsewhere", "exp": now + 60, "sub": "mailto:a@b"}),
                VapidError::Audience,
            ),
            (
                json!({"aud": origin, "exp": now - 3600, "sub": "mailto:a@b"}),
                VapidError::Expiry,
            ),
            (
                json!({"aud": origin, "exp": now + 25 * 3600, "sub": "mailto:a@b"}),
                VapidError::Expiry,
            ),
            (json!({"aud": origin, "exp": now + 60}), VapidError::Subject),
        ] {
            assert_eq!(refused(header(jwt(&key, "ES256", claims))), error);
        }
        assert_eq!(check(None, origin), Err(VapidError::Scheme));
        // The cache answers the header it verified alike, and verifies any other.
        let cache = VerifiedCache::default();
        let good = header(jwt(
            &key,
            "ES256",
            json!({"aud": origin, "exp": now + 3600, "sub": "mailto:a@b"}),
        ));
        for _ in 0..2 {
            assert_eq!(
                cache.check(Some(&good), origin).unwrap().public_key,
                vapid.public_key
            );
        }
        let forged = header(jwt(
            &other,
            "ES256",
            json!({"aud": origin, "exp": now + 3600, "sub": "mailto:a@b"}),
        ));
        assert_eq!(cache.check(Some(&forged), origin), Err(VapidError::Signature));
        assert_eq!(cache.check(Some(&good), origin).unwrap().subject, "mailto:a@b");
        assert_eq!(check(Some("WebPush abc"), origin), Err(VapidError::Scheme));
        assert_eq!(
            check(Some(&format!("vapid k={k}")), origin),
            Err(VapidError::Parameters)
        );
    }
}
