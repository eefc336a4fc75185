//! Delivery to browsers: Web Push (RFC 8030) to each subscription's push
//! service, the message encrypted as RFC 8291 says (`aes128gcm`, on
//! aws-lc-rs: [`encrypt`]) and signed with VAPID (RFC 8292), over
//! Clarion's pooled HTTP/2 transport, one pool per push-service origin.

pub mod channel_error;
pub mod encrypt;
pub mod errors;
pub mod message;
pub mod settings;
pub mod vapid;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use clarion_proto::platform::token_prefix;
use clarion_proto::{AllowedHosts, Platform, TokenBatch, WebSubscription};
use http::{HeaderName, HeaderValue, Method, Request, Uri};
use tracing::{debug, warn};

use crate::channel::{Attempt, PushChannel, Transport};
use crate::http2::Http2Pool;
pub use channel_error::WebPushError;
use message::PreparedWeb;
pub use settings::WebPushSettings;
use vapid::Vapid;

/// Most push-service origins with a pool of their own at once.
const MAX_ORIGINS: usize = 64;

pub struct WebPushChannel {
    vapid: Vapid,
    allowed: AllowedHosts,
    transport: Transport,
    /// Origin → its pool (a handful of push services).
    pools: Mutex<HashMap<String, Arc<Http2Pool>>>,
}

impl WebPushChannel {
    pub fn new(settings: &WebPushSettings, transport: Transport) -> Result<Self, WebPushError> {
        let (Some(key), Some(subject)) = (&settings.private_key_file, &settings.subject) else {
            return Err(WebPushError::MissingCredentials);
        };
        Ok(Self {
            vapid: Vapid::load(key, subject)?,
            allowed: settings.allowed_hosts.clone(),
            transport,
            pools: Mutex::new(HashMap::new()),
        })
    }

    /// The pool of `origin`, opened on first use.
    fn pool(&self, origin: &str) -> Option<Arc<Http2Pool>> {
        let mut pools = self.pools.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(pool) = pools.get(origin) {
            return Some(pool.clone());
        }
        if pools.len() >= MAX_ORIGINS {
            return None;
        }
        let pool = Arc::new(Http2Pool::new(origin, self.transport.tls.clone(), self.transport.limits).ok()?);
        pools.insert(origin.to_owned(), pool.clone());
        Some(pool)
    }

    /// The endpoint, its origin and the encrypted body; `Err` names why
    /// this subscription cannot be pushed to.
    fn encrypt(
        &self,
        subscription: &WebSubscription,
        plaintext: &[u8],
    ) -> Result<(Uri, String, Bytes), &'static str> {
        let url = url::Url::parse(&subscription.endpoint).map_err(|_| "bad_endpoint")?;
        let host = url.host_str().ok_or("bad_endpoint")?;
        if url.scheme() != "https" || !self.allowed.permits(host) {
            return Err("host_not_allowed");
        }
        let origin = url.origin().ascii_serialization();
        let uri: Uri = subscription.endpoint.parse().map_err(|_| "bad_endpoint")?;
        let key = subscription.public_key().map_err(|_| "bad_key")?;
        let auth = subscription.auth_secret().map_err(|_| "bad_key")?;
        let body = encrypt::encrypt(plaintext, &key, &auth).map_err(|err| match err {
            encrypt::EncryptError::BadKey => "bad_key",
            encrypt::EncryptError::TooLong | encrypt::EncryptError::Library => "encryption",
        })?;
        Ok((uri, origin, Bytes::from(body)))
    }
}

impl PushChannel for WebPushChannel {
    const PLATFORM: Platform = Platform::Web;
    const PROVIDER: &'static str = "webpush";
    type Prepared = PreparedWeb;
    /// A prepared web push holds its batch's subscriptions.
    const PREPARED_PER_TARGET: bool = false;
    type Error = WebPushError;
    const NOT_THE_PROVIDER: &'static str = errors::NOT_A_PUSH_SERVICE;
    const ENDPOINT_SETTING: &'static str = "CLARION_WEBPUSH_ALLOWED_HOSTS";
    const MISCONFIGURED: &'static [&'static str] = &[errors::NOT_A_PUSH_SERVICE, errors::VAPID_REFUSED];
    const SETTINGS_TO_CHECK: &'static str = "the VAPID key and subject, and the allowed push-service hosts";
    const DEFAULT_APP_SETTINGS: &'static str = "CLARION_VAPID_PRIVATE_KEY_FILE and CLARION_VAPID_SUBJECT";

    type Settings = WebPushSettings;

    fn default_configured(settings: &WebPushSettings) -> bool {
        settings.default_configured()
    }

    async fn connect(settings: &WebPushSettings, transport: Transport) -> Result<Self, WebPushError> {
        Self::new(settings, transport)
    }

    fn check_app(table: &toml::Table) -> Result<(), WebPushError> {
        settings::check_app(table)
    }

    fn for_app(settings: &WebPushSettings, table: &toml::Table) -> Result<WebPushSettings, WebPushError> {
        settings.for_app(table)
    }

    fn prepare(&self, batch: &TokenBatch) -> Result<PreparedWeb, WebPushError> {
        message::prepare(batch)
    }

    async fn send(&self, token: &str, prepared: &PreparedWeb) -> Attempt {
        let Some(subscription) = prepared.subscriptions.get(token) else {
            return Attempt::Failed("no_subscription");
        };
        let (uri, origin, body) = match self.encrypt(subscription, &prepared.plaintext) {
            Ok(parts) => parts,
            Err(reason) => {
                warn!(
                    token = token_prefix(token),
                    reason, "web push subscription not pushed to"
                );
                return Attempt::Failed(reason);
            }
        };
        let (Some(pool), Some(authorization)) = (self.pool(&origin), self.vapid.authorization(&origin))
        else {
            return Attempt::Retry {
                reason: "origin",
                after: None,
                throttled: false,
            };
        };
        let request = || {
            push_request(
                &uri,
                &authorization,
                &prepared.ttl,
                &prepared.urgency,
                prepared.topic.as_ref(),
            )
        };
        match pool.send(request, body).await {
            Ok(response) => errors::classify(response.status, &response.headers),
            Err(err) => {
                debug!(error = %err, "web push request failed");
                Attempt::Retry {
                    reason: err.label(),
                    after: None,
                    throttled: false,
                }
            }
        }
    }

    async fn reauthenticate(&self) {
        self.vapid.forget();
    }
}

/// One push's request head (RFC 8030 and 8292): `POST` to the
/// subscription's endpoint with the VAPID `Authorization`, an `aes128gcm`
/// body and its `TTL`, `Urgency` and, when given, `Topic`.
pub fn push_request(
    uri: &Uri,
    authorization: &HeaderValue,
    ttl: &HeaderValue,
    urgency: &HeaderValue,
    topic: Option<&HeaderValue>,
) -> Request<()> {
    let mut request = Request::new(());
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri.clone();
    let headers = request.headers_mut();
    headers.insert(http::header::AUTHORIZATION, authorization.clone());
    headers.insert(
        http::header::CONTENT_ENCODING,
        HeaderValue::from_static("aes128gcm"),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(HeaderName::from_static("ttl"), ttl.clone());
    headers.insert(HeaderName::from_static("urgency"), urgency.clone());
    if let Some(topic) = topic {
        headers.insert(HeaderName::from_static("topic"), topic.clone());
    }
    request
}
