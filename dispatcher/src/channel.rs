//! The one small trait every delivery channel (APNs, FCM) implements, so a
//! third channel is a new folder (client, errors, settings) plus its
//! platform in proto, its settings group and apps-file check in
//! `channels.rs` and one line in `start`, not edits everywhere. A channel
//! sees only its own settings ([`PushChannel::Settings`]), never the
//! dispatcher's.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clarion_proto::{Platform, TokenBatch};
use rustls::ClientConfig;

use crate::http2::PoolLimits;

/// What became of one attempt to push to one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// Accepted by Apple / Google.
    Accepted,
    /// The provider says the app is gone from the device: clean the token up.
    Unregistered,
    /// The token is malformed or belongs to another app / project: never retried.
    Invalid(&'static str),
    /// Worth another attempt (429, 5xx, connection trouble). `after` comes
    /// from `Retry-After`; `throttled` means the provider asked us to slow down.
    Retry {
        reason: &'static str,
        after: Option<Duration>,
        throttled: bool,
    },
    /// Our credentials were refused as expired: renew them, then retry.
    Reauthenticate(&'static str),
    /// Refused for good, for a reason that is not the token's.
    Failed(&'static str),
}

/// What every channel's HTTP/2 client is built from.
#[derive(Clone)]
pub struct Transport {
    /// Trusts the system roots and `CLARION_EXTRA_CA_FILE`.
    pub tls: Arc<ClientConfig>,
    pub limits: PoolLimits,
    /// `CLARION_EXTRA_CA_FILE`, for clients built outside the pool (OAuth2).
    pub extra_ca_file: Option<PathBuf>,
}

/// A way to push to devices of one platform.
pub trait PushChannel: Sized + Send + Sync + 'static {
    /// The platform whose delivery queue this channel serves.
    const PLATFORM: Platform;
    /// The provider's name in spans and logs (`apns`, `fcm`).
    const PROVIDER: &'static str;

    /// The failure label of an answer that is not this provider's at all
    /// (the endpoint is probably not the provider's).
    const NOT_THE_PROVIDER: &'static str;
    /// The setting naming the provider's endpoint (for the log saying it
    /// answers like another server).
    const ENDPOINT_SETTING: &'static str;
    /// Failure labels that point at Clarion's configuration rather than at
    /// the provider being busy or down: the breaker judges a segment on them.
    const MISCONFIGURED: &'static [&'static str];
    /// What an operator checks when many pushes are refused as invalid or
    /// as misconfigured.
    const SETTINGS_TO_CHECK: &'static str;

    /// Everything about a notification's push that does not depend on the
    /// device — payload, headers, and the route (endpoint, environment) of
    /// the batch, which is homogeneous: built once per batch and reused for
    /// all its tokens.
    type Prepared: Send + Sync + 'static;

    /// Whether a prepared push serves every batch of its target (its
    /// notification, environment and text), as it does when it holds
    /// nothing of the batch's devices; false when it does (web push keeps
    /// each batch's subscriptions beside its payload): then each batch is
    /// prepared anew.
    const PREPARED_PER_TARGET: bool = true;

    /// Whether the channel sends Live Activity start pushes (a batch whose
    /// notification carries one); any other channel counts such a batch
    /// failed without a push.
    const LIVE_ACTIVITIES: bool = false;

    /// Why the channel cannot be built, or a push prepared.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The channel's own settings (its group of `--help`; the `default`
    /// app's credentials among them).
    type Settings: Clone + Send + Sync + 'static;

    /// The settings that give the `default` app's credentials for this
    /// channel, as an operator sets them (for the refusal to start with no
    /// app at all).
    const DEFAULT_APP_SETTINGS: &'static str;

    /// True when `settings` give the `default` app credentials for this
    /// channel (some of them at least: incomplete ones stop the start).
    fn default_configured(settings: &Self::Settings) -> bool;

    /// Builds the channel from its settings; runs on the delivery runtime.
    fn connect(
        settings: &Self::Settings,
        transport: Transport,
    ) -> impl Future<Output = Result<Self, Self::Error>> + Send;

    /// Checks an app's table of this channel in the apps file
    /// (`[apps.<id>.<channel>]`, or its flat `<channel>_*` keys).
    fn check_app(table: &toml::Table) -> Result<(), Self::Error>;

    /// The settings a channel of an app is built from: `settings` with the
    /// app's credentials for this channel, from its `table` in the apps file.
    fn for_app(settings: &Self::Settings, table: &toml::Table) -> Result<Self::Settings, Self::Error>;

    /// Pushes a minute each provider project may send, shared by the
    /// replicas (0: the provider has no such quota).
    fn quota_per_minute(_settings: &Self::Settings) -> u64 {
        0
    }

    /// Builds the push of `batch`'s notification to `batch`'s route.
    fn prepare(&self, batch: &TokenBatch) -> Result<Self::Prepared, Self::Error>;

    /// One attempt to push `prepared` to `token`.
    fn send(&self, token: &str, prepared: &Self::Prepared) -> impl Future<Output = Attempt> + Send;

    /// Renews the credentials after a [`Attempt::Reauthenticate`].
    fn reauthenticate(&self) -> impl Future<Output = ()> + Send;

    /// The project whose quota this channel's pushes count against, when
    /// the provider has one to share among replicas (FCM).
    fn quota_project(&self) -> Option<&str> {
        None
    }
}

/// The `Retry-After` of an answer, in whole seconds (the HTTP-date form is
/// not used by APNs or FCM).
pub fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}
