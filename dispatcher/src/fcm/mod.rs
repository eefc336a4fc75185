//! Delivery to Google: the FCM HTTP v1 API over Clarion's pooled HTTP/2
//! transport, with an OAuth2 service-account token.

pub mod auth;
pub mod channel_error;
pub mod errors;
pub mod message;
pub mod settings;

use clarion_proto::{Platform, TokenBatch};
use http::{HeaderValue, Method, Request, Uri};
use tracing::{debug, warn};

use crate::channel::{Attempt, PushChannel, Transport};
use crate::http2::Http2Pool;
use auth::FcmAuth;
pub use channel_error::FcmError;
use message::PreparedFcm;
pub use settings::FcmSettings;

pub struct FcmChannel {
    pool: Http2Pool,
    auth: FcmAuth,
    /// `{endpoint}/v1/projects/{project}/messages:send`, built once.
    uri: Uri,
    /// The Firebase project, whose quota the pushes count against.
    project: String,
}

impl FcmChannel {
    /// Reads the service account; the first access token is fetched on first use.
    pub async fn new(settings: &FcmSettings, transport: Transport) -> Result<Self, FcmError> {
        let Transport {
            tls,
            limits,
            extra_ca_file,
        } = transport;
        let extra_ca = extra_ca_file.as_deref();
        let credentials = settings
            .credentials_file
            .clone()
            .ok_or(FcmError::MissingCredentials)?;
        let (account_project, auth) = auth::from_credentials(&credentials, extra_ca).await?;
        let project = settings
            .project_id
            .clone()
            .filter(|p| !p.is_empty())
            .or(Some(account_project).filter(|p| !p.is_empty()))
            .ok_or(FcmError::NoProject)?;
        let pool = Http2Pool::new(&settings.endpoint, tls, limits)?;
        let uri = pool
            .uri(format!("/v1/projects/{project}/messages:send"))
            .map_err(|_| FcmError::ProjectId(project.clone()))?;
        Ok(Self {
            pool,
            auth,
            uri,
            project,
        })
    }
}

impl PushChannel for FcmChannel {
    const PLATFORM: Platform = Platform::Android;
    const PROVIDER: &'static str = "fcm";
    type Prepared = PreparedFcm;
    type Error = FcmError;
    const NOT_THE_PROVIDER: &'static str = errors::NOT_FCM;
    const ENDPOINT_SETTING: &'static str = "CLARION_FCM_ENDPOINT (or the app's fcm_endpoint)";
    const MISCONFIGURED: &'static [&'static str] = &[
        errors::NOT_FCM,
        "PERMISSION_DENIED",
        "THIRD_PARTY_AUTH_ERROR",
        "NOT_FOUND",
        "UnexpectedStatus",
    ];
    const SETTINGS_TO_CHECK: &'static str = "the endpoint, service account and Firebase project";
    const DEFAULT_APP_SETTINGS: &'static str = "CLARION_FCM_CREDENTIALS_FILE (and CLARION_FCM_PROJECT_ID)";

    type Settings = FcmSettings;

    fn default_configured(settings: &FcmSettings) -> bool {
        settings.default_configured()
    }

    async fn connect(settings: &FcmSettings, transport: Transport) -> Result<Self, FcmError> {
        Self::new(settings, transport).await
    }

    fn check_app(table: &toml::Table) -> Result<(), FcmError> {
        settings::check_app(table)
    }

    fn for_app(settings: &FcmSettings, table: &toml::Table) -> Result<FcmSettings, FcmError> {
        settings.for_app(table)
    }

    fn quota_per_minute(settings: &FcmSettings) -> u64 {
        settings.quota_per_minute
    }

    fn prepare(&self, batch: &TokenBatch) -> Result<PreparedFcm, FcmError> {
        Ok(message::prepare(
            &batch.message(),
            batch.sent_at,
            chrono::Utc::now(),
        )?)
    }

    async fn send(&self, token: &str, prepared: &PreparedFcm) -> Attempt {
        let authorization = match self.auth.header().await {
            Ok(header) => header,
            Err(err) => {
                warn!(error = %err, "no FCM access token");
                return Attempt::Retry {
                    reason: "oauth",
                    after: None,
                    throttled: false,
                };
            }
        };
        let request = || {
            let mut request = Request::new(());
            *request.method_mut() = Method::POST;
            *request.uri_mut() = self.uri.clone();
            let headers = request.headers_mut();
            headers.insert(http::header::AUTHORIZATION, authorization.clone());
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            request
        };
        match self.pool.send(request, prepared.body(token)).await {
            Ok(response) => errors::classify(response.status, &response.headers, &response.body),
            Err(err) => {
                debug!(error = %err, "FCM request failed");
                Attempt::Retry {
                    reason: err.label(),
                    after: None,
                    throttled: false,
                }
            }
        }
    }

    async fn reauthenticate(&self) {
        self.auth.renew().await;
    }

    fn quota_project(&self) -> Option<&str> {
        Some(&self.project)
    }
}
