//! The APNs provider token: an ES256 JWT signed with the team's `.p8` key,
//! reused for `CLARION_APNS_TOKEN_REFRESH_SECS` (Apple wants a new one every
//! 20 to 60 minutes, and no more often: `TooManyProviderTokenUpdates`).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use http::HeaderValue;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;

/// Never renew more often than this, even when Apple says the token expired.
const MIN_RENEWAL_INTERVAL: Duration = Duration::from_secs(60);

/// Why a provider token cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read {path}: {source}")]
    ReadKey { path: String, source: std::io::Error },
    #[error("{path} is not a PKCS#8 EC (.p8) key: {source}")]
    Key {
        path: String,
        source: jsonwebtoken::errors::Error,
    },
    #[error("signing the provider token: {0}")]
    Sign(jsonwebtoken::errors::Error),
    #[error("the provider token is not a valid header value: {0}")]
    Header(#[from] http::header::InvalidHeaderValue),
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    iat: u64,
}

struct Signed {
    header: HeaderValue,
    signed_at: Instant,
}

pub struct ProviderToken {
    key: EncodingKey,
    key_id: String,
    team_id: String,
    refresh_after: Duration,
    current: ArcSwap<Signed>,
    renewing: Mutex<()>,
}

impl ProviderToken {
    pub fn new(
        key_file: &Path,
        key_id: &str,
        team_id: &str,
        refresh_after: Duration,
    ) -> Result<Self, TokenError> {
        let path = || key_file.display().to_string();
        let pem = std::fs::read(key_file).map_err(|source| TokenError::ReadKey { path: path(), source })?;
        let key =
            EncodingKey::from_ec_pem(&pem).map_err(|source| TokenError::Key { path: path(), source })?;
        let first = sign(&key, key_id, team_id)?;
        Ok(Self {
            key,
            key_id: key_id.to_owned(),
            team_id: team_id.to_owned(),
            refresh_after,
            current: ArcSwap::from_pointee(Signed {
                header: first,
                signed_at: Instant::now(),
            }),
            renewing: Mutex::new(()),
        })
    }

    /// The `authorization` header value, renewed when due.
    pub fn header(&self) -> HeaderValue {
        let current = self.current.load();
        if current.signed_at.elapsed() < self.refresh_after {
            return current.header.clone();
        }
        self.renew(self.refresh_after)
    }

    /// Renews now (Apple said the token expired), unless it is brand new.
    pub fn force_renew(&self) {
        self.renew(MIN_RENEWAL_INTERVAL);
    }

    /// Signs a new token if the current one is at least `older_than` old.
    fn renew(&self, older_than: Duration) -> HeaderValue {
        let _one_at_a_time = self.renewing.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.current.load();
        if current.signed_at.elapsed() < older_than {
            return current.header.clone();
        }
        match sign(&self.key, &self.key_id, &self.team_id) {
            Ok(header) => {
                self.current.store(Arc::new(Signed {
                    header: header.clone(),
                    signed_at: Instant::now(),
                }));
                header
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot sign a new APNs provider token; keeping the old one");
                current.header.clone()
            }
        }
    }
}

fn sign(key: &EncodingKey, key_id: &str, team_id: &str) -> Result<HeaderValue, TokenError> {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(key_id.to_owned());
    let iat = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let jwt = jsonwebtoken::encode(&header, &Claims { iss: team_id, iat }, key).map_err(TokenError::Sign)?;
    Ok(HeaderValue::from_str(&format!("bearer {jwt}"))?)
}
