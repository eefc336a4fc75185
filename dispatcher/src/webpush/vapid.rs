//! VAPID (RFC 8292): the application server's ES256-signed JWT and its
//! public key, sent as `Authorization: vapid t=<jwt>, k=<key>`. One JWT per
//! push-service origin (its `aud`), valid 12 hours (RFC 8292 allows at
//! most 24), cached and renewed an hour before it expires.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clarion_proto::web_push::base64url;
use http::HeaderValue;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::pkcs8::DecodePrivateKey;
use serde::Serialize;

use super::channel_error::WebPushError;

/// How long a JWT is valid.
pub const JWT_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// How long before its expiry a JWT is replaced.
pub const RENEW_BEFORE: Duration = Duration::from_secs(3600);
/// Most origins whose JWT is kept (push services are a handful; the
/// allow-list's `*.` entries could name more): past it the cache starts over.
const MAX_ORIGINS: usize = 1024;

#[derive(Serialize)]
struct Claims<'a> {
    aud: &'a str,
    exp: u64,
    sub: &'a str,
}

pub struct Vapid {
    key: EncodingKey,
    /// `k=`: the public key, uncompressed, base64url.
    public_key: String,
    subject: String,
    /// Origin → (header, expiry in seconds since the epoch).
    cache: Mutex<HashMap<String, (HeaderValue, u64)>>,
}

impl Vapid {
    /// From a PEM P-256 private key (PKCS #8 or SEC 1) and a `mailto:` or
    /// `https:` subject.
    pub fn from_pem(pem: &str, subject: &str) -> Result<Self, String> {
        let secret = p256::SecretKey::from_pkcs8_pem(pem)
            .or_else(|_| p256::SecretKey::from_sec1_pem(pem))
            .map_err(|_| "not a P-256 private key in PEM (PKCS #8 or SEC 1)".to_owned())?;
        let public_key = base64url(secret.public_key().to_encoded_point(false).as_bytes());
        let pkcs8 = p256::pkcs8::EncodePrivateKey::to_pkcs8_pem(&secret, Default::default())
            .map_err(|err| err.to_string())?;
        let key = EncodingKey::from_ec_pem(pkcs8.as_bytes()).map_err(|err| err.to_string())?;
        Ok(Self {
            key,
            public_key,
            subject: subject.to_owned(),
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// Reads the key file.
    pub fn load(path: &Path, subject: &str) -> Result<Self, WebPushError> {
        if !(subject.starts_with("mailto:") || subject.starts_with("https://")) {
            return Err(WebPushError::Subject(subject.to_owned()));
        }
        let key_error = |reason: String| WebPushError::Key {
            path: path.display().to_string(),
            reason,
        };
        let pem = std::fs::read_to_string(path).map_err(|err| key_error(err.to_string()))?;
        Self::from_pem(&pem, subject).map_err(key_error)
    }

    /// The `Authorization` header for pushes to `origin`, from the cache
    /// unless it is due for renewal.
    pub fn authorization(&self, origin: &str) -> Option<HeaderValue> {
        let now = now_secs();
        let mut cache = self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((header, exp)) = cache.get(origin)
            && now + RENEW_BEFORE.as_secs() < *exp
        {
            return Some(header.clone());
        }
        let exp = now + JWT_LIFETIME.as_secs();
        let claims = Claims {
            aud: origin,
            exp,
            sub: &self.subject,
        };
        let jwt = jsonwebtoken::encode(&Header::new(Algorithm::ES256), &claims, &self.key).ok()?;
        let header = HeaderValue::from_str(&format!("vapid t={jwt}, k={}", self.public_key)).ok()?;
        if cache.len() >= MAX_ORIGINS {
            cache.clear();
        }
        cache.insert(origin.to_owned(), (header.clone(), exp));
        Some(header)
    }

    /// Forgets every JWT (after a 401/403: the next push signs anew).
    pub fn forget(&self) {
        self.cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::pkcs8::EncodePrivateKey;

    fn vapid() -> Vapid {
        let secret = p256::SecretKey::random(&mut p256::elliptic_curve::rand_core::OsRng);
        let pem = secret.to_pkcs8_pem(Default::default()).unwrap();
        Vapid::from_pem(&pem, "mailto:ops@example.com").unwrap()
    }

    #[test]
    fn the_jwt_names_the_origin_expires_within_a_day_and_is_cached_per_origin() {
        let vapid = vapid();
        let header = vapid.authorization("https://push.example.net").unwrap();
        let text = header.to_str().unwrap();
        let (jwt, key) = text
            .strip_prefix("vapid t=")
            .and_then(|rest| rest.split_once(", k="))
            .unwrap();
        assert_eq!(key, vapid.public_key);
        assert_eq!(clarion_proto::web_push::base64url_decode(key).unwrap().len(), 65);
        let mut validation = jsonwebtoken::Validation::new(Algorithm::ES256);
        validation.set_audience(&["https://push.example.net"]);
        let point = clarion_proto::web_push::base64url_decode(key).unwrap();
        let decoding = jsonwebtoken::DecodingKey::from_ec_components(
            &base64url(&point[1..33]),
            &base64url(&point[33..65]),
        )
        .unwrap();
        let claims = jsonwebtoken::decode::<serde_json::Value>(jwt, &decoding, &validation)
            .unwrap()
            .claims;
        assert_eq!(claims["sub"], "mailto:ops@example.com");
        let exp = claims["exp"].as_u64().unwrap();
        assert!(exp <= now_secs() + 24 * 3600 && exp > now_secs());
        assert_eq!(vapid.authorization("https://push.example.net").unwrap(), header);
        assert_ne!(vapid.authorization("https://other.example.net").unwrap(), header);
    }

    #[test]
    fn a_subject_must_be_mailto_or_https() {
        let err = Vapid::load(Path::new("/nonexistent"), "ops@example.com")
            .err()
            .unwrap();
        assert!(matches!(err, WebPushError::Subject(_)), "{err}");
    }
}
