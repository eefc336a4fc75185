//! OAuth2 access tokens for FCM from a service account (yup-oauth2), fetched
//! over a client that trusts `CLARION_EXTRA_CA_FILE` too, cached, and
//! renewed before they expire (or at once when FCM refuses one).
//!
//! A renewal due while the cached token is still valid is made by one push
//! only; every other push goes on with the cached token meanwhile, so a
//! slow or hung token endpoint holds no push while a valid token exists.
//! Only when no valid token is left do pushes wait for the fetch (one at a
//! time, each bounded by [`TOKEN_FETCH_TIMEOUT`]).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use http::HeaderValue;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tracing::{info, warn};
use yup_oauth2::authenticator::Authenticator;
use yup_oauth2::{CustomHyperClientBuilder, ServiceAccountAuthenticator, ServiceAccountKey};

use crate::http2::{TlsError, client_config};

pub const FCM_SCOPE: &str = "https://www.googleapis.com/auth/firebase.messaging";
/// A token is renewed this long before it expires.
const RENEW_MARGIN: Duration = Duration::from_secs(300);
/// Forced renewals (after a 401) happen at most this often.
const MIN_FORCED_RENEWAL: Duration = Duration::from_secs(30);
/// Longest a token request may take: Google answers in well under a
/// second; a hung token endpoint must not hold every Android push (they
/// wait on one fetch at a time) for longer than this.
pub const TOKEN_FETCH_TIMEOUT: Duration = Duration::from_secs(10);

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// Why no access token (or no authenticator) could be had.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read the service account {path}: {source}")]
    ServiceAccount { path: String, source: std::io::Error },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("cannot set up the OAuth2 client: {0}")]
    Client(std::io::Error),
    #[error("OAuth2 token request got no answer within {0:?}")]
    NoAnswer(Duration),
    #[error("OAuth2 token request failed: {0}")]
    Request(#[from] yup_oauth2::Error),
    #[error("the OAuth2 answer holds no access token")]
    NoToken,
    #[error("the access token is not a valid header value: {0}")]
    Header(#[from] http::header::InvalidHeaderValue),
}

struct Cached {
    header: HeaderValue,
    renew_at: Instant,
    expires_at: Instant,
    fetched_at: Instant,
}

pub struct FcmAuth {
    authenticator: Authenticator<Connector>,
    cached: ArcSwapOption<Cached>,
    fetching: tokio::sync::Mutex<()>,
}

/// The service account's project and the authenticator for it. The token
/// fetch trusts `extra_ca` like every other outbound client.
pub async fn from_credentials(path: &Path, extra_ca: Option<&Path>) -> Result<(String, FcmAuth), AuthError> {
    let key: ServiceAccountKey = yup_oauth2::read_service_account_key(path)
        .await
        .map_err(|source| AuthError::ServiceAccount {
            path: path.display().to_string(),
            source,
        })?;
    let project = key.project_id.clone().unwrap_or_default();
    // hyper-rustls negotiates ALPN itself: a configuration without it.
    let tls = client_config(extra_ca, &[])?;
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(Arc::unwrap_or_clone(tls))
        .https_only()
        .enable_http1()
        .enable_http2()
        .build();
    // A fresh connection for every fetch (one an hour or so): a pooled one
    // that went silent would take every later fetch down with it, since the
    // fetch deadline drops the request, not the connection.
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build::<_, String>(connector);
    let authenticator = ServiceAccountAuthenticator::with_client(key, CustomHyperClientBuilder::from(client))
        .build()
        .await
        .map_err(AuthError::Client)?;
    Ok((
        project,
        FcmAuth {
            authenticator,
            cached: ArcSwapOption::empty(),
            fetching: tokio::sync::Mutex::new(()),
        },
    ))
}

impl FcmAuth {
    /// The `authorization` header value, fetching a token when none is fresh.
    pub async fn header(&self) -> Result<HeaderValue, AuthError> {
        let now = Instant::now();
        let Some(cached) = self.cached.load_full().filter(|c| now < c.expires_at) else {
            return self.fetch(false).await;
        };
        if now < cached.renew_at {
            return Ok(cached.header.clone());
        }
        // Due for renewal, still valid: whoever gets the lock renews, the
        // others use the cached token (no waiting on a slow endpoint).
        let Ok(renewing) = self.fetching.try_lock() else {
            return Ok(cached.header.clone());
        };
        match self.fetch_holding(false, renewing).await {
            Ok(header) => Ok(header),
            Err(err) if Instant::now() < cached.expires_at => {
                warn!(error = %err, "cannot renew the FCM access token yet; the current one is still valid");
                Ok(cached.header.clone())
            }
            Err(err) => Err(err),
        }
    }

    /// Fetches a new token now (FCM refused the current one).
    pub async fn renew(&self) {
        let recent = self
            .cached
            .load_full()
            .is_some_and(|c| c.fetched_at.elapsed() < MIN_FORCED_RENEWAL);
        if !recent && let Err(err) = self.fetch(true).await {
            warn!(error = %err, "cannot renew the FCM access token");
        }
    }

    async fn fetch(&self, force: bool) -> Result<HeaderValue, AuthError> {
        let one_at_a_time = self.fetching.lock().await;
        self.fetch_holding(force, one_at_a_time).await
    }

    /// Fetches while holding the fetch lock (`_held`).
    async fn fetch_holding(
        &self,
        force: bool,
        _held: tokio::sync::MutexGuard<'_, ()>,
    ) -> Result<HeaderValue, AuthError> {
        if !force && let Some(cached) = self.cached.load_full().filter(|c| Instant::now() < c.renew_at) {
            return Ok(cached.header.clone());
        }
        let request = async {
            if force {
                self.authenticator.force_refreshed_token(&[FCM_SCOPE]).await
            } else {
                self.authenticator.token(&[FCM_SCOPE]).await
            }
        };
        let token = tokio::time::timeout(TOKEN_FETCH_TIMEOUT, request)
            .await
            .map_err(|_| AuthError::NoAnswer(TOKEN_FETCH_TIMEOUT))??;
        let value = token.token().ok_or(AuthError::NoToken)?;
        let header = HeaderValue::from_str(&format!("Bearer {value}"))?;
        let lifetime = token
            .expiration_time()
            .map(|expires| {
                let left = expires - time::OffsetDateTime::now_utc();
                Duration::from_secs(left.whole_seconds().max(0) as u64)
            })
            .unwrap_or(Duration::from_secs(3600));
        let now = Instant::now();
        self.cached.store(Some(Arc::new(Cached {
            header: header.clone(),
            renew_at: now + lifetime.saturating_sub(RENEW_MARGIN).max(lifetime / 2),
            expires_at: now + lifetime,
            fetched_at: now,
        })));
        info!(lifetime_s = lifetime.as_secs(), "FCM access token fetched");
        Ok(header)
    }
}
