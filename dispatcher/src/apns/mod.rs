//! Delivery to Apple: `a2`'s payload and error model over Clarion's pooled
//! HTTP/2 transport, one pool per APNs environment (and one per
//! environment's channel-management host, for Live Activity channels),
//! provider-token auth.

pub mod broadcast;
pub mod channel_error;
pub mod errors;
pub mod live_activity;
pub mod payload;
pub mod settings;
pub mod token;

use std::time::Duration;

use bytes::Bytes;
use clarion_proto::{ApnsEnvironment, Platform, TokenBatch};
use http::{HeaderValue, Method, Request, Uri};
use tracing::debug;

use crate::channel::{Attempt, PushChannel, Transport};
use crate::http2::Http2Pool;
pub use channel_error::ApnsError;
use payload::PreparedApns;
pub use settings::ApnsSettings;
use token::ProviderToken;

/// The path of a push, before the device token.
const DEVICE_PATH: &str = "/3/device/";

/// The URI of a push to `token` on `pool`'s origin.
fn device_uri(pool: &Http2Pool, token: &str) -> Result<Uri, http::Error> {
    // Built by hand: `format!` costs more than the two copies.
    let mut path = String::with_capacity(DEVICE_PATH.len() + token.len());
    path.push_str(DEVICE_PATH);
    path.push_str(token);
    pool.uri(path)
}

pub struct ApnsChannel {
    production: Http2Pool,
    sandbox: Http2Pool,
    /// Apple's channel-management hosts (Live Activity broadcast
    /// channels); nothing is connected until a channel command comes.
    channels_production: Http2Pool,
    channels_sandbox: Http2Pool,
    token: ProviderToken,
    topic: HeaderValue,
    /// The bundle id, as the channel and broadcast paths name it.
    bundle: String,
    /// `<bundle>.push-type.liveactivity`, the topic of a start push.
    live_activity_topic: HeaderValue,
}

/// A batch's push: its payload, and which APNs environment its tokens
/// belong to (a batch never mixes them).
pub struct ApnsPush {
    pub payload: PreparedApns,
    pub environment: ApnsEnvironment,
}

impl ApnsChannel {
    pub fn new(settings: &ApnsSettings, transport: Transport) -> Result<Self, ApnsError> {
        let Transport { tls, limits, .. } = transport;
        let required =
            |value: &Option<String>, name: &'static str| value.clone().ok_or(ApnsError::Missing(name));
        let key_file = settings
            .key_file
            .clone()
            .ok_or(ApnsError::Missing("CLARION_APNS_KEY_FILE"))?;
        let key_id = required(&settings.key_id, "CLARION_APNS_KEY_ID")?;
        let team_id = required(&settings.team_id, "CLARION_APNS_TEAM_ID")?;
        let topic = required(&settings.topic, "CLARION_APNS_TOPIC")?;
        let refresh = Duration::from_secs(settings.token_refresh_secs);
        Ok(Self {
            production: Http2Pool::new(&settings.endpoint, tls.clone(), limits)?,
            sandbox: Http2Pool::new(&settings.sandbox_endpoint, tls.clone(), limits)?,
            channels_production: Http2Pool::new(&settings.channels_endpoint, tls.clone(), limits)?,
            channels_sandbox: Http2Pool::new(&settings.channels_sandbox_endpoint, tls, limits)?,
            token: ProviderToken::new(&key_file, &key_id, &team_id, refresh)?,
            topic: HeaderValue::from_str(&topic).map_err(|_| ApnsError::Topic)?,
            live_activity_topic: HeaderValue::from_str(&live_activity::topic(&topic))
                .map_err(|_| ApnsError::Topic)?,
            bundle: topic,
        })
    }

    /// The push pool of an APNs environment.
    fn push_pool(&self, environment: ApnsEnvironment) -> &Http2Pool {
        match environment {
            ApnsEnvironment::Production => &self.production,
            ApnsEnvironment::Sandbox => &self.sandbox,
        }
    }

    /// The channel-management pool of an APNs environment.
    fn channels_pool(&self, environment: ApnsEnvironment) -> &Http2Pool {
        match environment {
            ApnsEnvironment::Production => &self.channels_production,
            ApnsEnvironment::Sandbox => &self.channels_sandbox,
        }
    }
}

impl PushChannel for ApnsChannel {
    const PLATFORM: Platform = Platform::Ios;
    const PROVIDER: &'static str = "apns";
    type Prepared = ApnsPush;
    type Error = ApnsError;
    const NOT_THE_PROVIDER: &'static str = errors::NOT_APNS;
    const ENDPOINT_SETTING: &'static str =
        "CLARION_APNS_ENDPOINT (or `endpoint` in the app's `[apps.<id>.apns]`)";
    const MISCONFIGURED: &'static [&'static str] = &[
        errors::NOT_APNS,
        "BadTopic",
        "InvalidProviderToken",
        "MissingProviderToken",
        "Forbidden",
        "UnexpectedStatus",
    ];
    const SETTINGS_TO_CHECK: &'static str = "the endpoint, key, bundle id and APNs environment";
    const DEFAULT_APP_SETTINGS: &'static str =
        "CLARION_APNS_KEY_FILE, CLARION_APNS_KEY_ID, CLARION_APNS_TEAM_ID and CLARION_APNS_TOPIC";

    type Settings = ApnsSettings;

    fn default_configured(settings: &ApnsSettings) -> bool {
        settings.default_configured()
    }

    async fn connect(settings: &ApnsSettings, transport: Transport) -> Result<Self, ApnsError> {
        Self::new(settings, transport)
    }

    fn check_app(table: &toml::Table) -> Result<(), ApnsError> {
        settings::check_app(table)
    }

    fn for_app(settings: &ApnsSettings, table: &toml::Table) -> Result<ApnsSettings, ApnsError> {
        settings.for_app(table)
    }

    const LIVE_ACTIVITIES: bool = true;

    fn prepare(&self, batch: &TokenBatch) -> Result<ApnsPush, ApnsError> {
        let payload = match &batch.notification.live_activity {
            Some(start) => live_activity::prepare_start(batch, start, &self.live_activity_topic)?,
            None => payload::prepare(&batch.message(), batch.sent_at, &self.topic)?,
        };
        Ok(ApnsPush {
            payload,
            environment: batch.environment,
        })
    }

    async fn send(&self, token: &str, push: &ApnsPush) -> Attempt {
        let pool = self.push_pool(push.environment);
        let Ok(uri) = device_uri(pool, token) else {
            return Attempt::Invalid("BadDeviceToken");
        };
        // The URI built above serves the first attempt; a request sent
        // again on a fresh connection (the server never processed it)
        // builds its own.
        let mut first = Some(uri);
        let request = || {
            let uri = first
                .take()
                .or_else(|| device_uri(pool, token).ok())
                .unwrap_or_default();
            let mut request = Request::new(());
            *request.method_mut() = Method::POST;
            *request.uri_mut() = uri;
            let headers = request.headers_mut();
            headers.clone_from(&push.payload.headers);
            headers.insert(http::header::AUTHORIZATION, self.token.header());
            request
        };
        match pool.send(request, Bytes::clone(&push.payload.body)).await {
            Ok(response) => errors::classify(response.status, &response.headers, &response.body),
            Err(err) => {
                debug!(error = %err, "APNs request failed");
                Attempt::Retry {
                    reason: err.label(),
                    after: None,
                    throttled: false,
                }
            }
        }
    }

    async fn reauthenticate(&self) {
        self.token.force_renew();
    }
}
