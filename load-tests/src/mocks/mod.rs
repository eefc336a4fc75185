//! Mock APNs, FCM and web push servers that speak the real protocols
//! (HTTP/2 over TLS, provider-token JWTs, OAuth2 service-account
//! assertions, VAPID and RFC 8291 encryption, the providers' error bodies),
//! with fault injection and per-token accounting behind a small control
//! API. They stand in for Apple, Google and the browsers' push services in
//! the tests, the demo and the benchmark; nothing else is mocked. With
//! receipts on, the phones behind them report what they got to Clarion
//! ([`phones`]).

use std::time::{SystemTime, UNIX_EPOCH};

pub mod accounting;
pub mod apns;
pub mod apns_channels;
pub mod control;
pub mod faults;
pub mod fcm;
pub mod own_thread;
pub mod phones;
pub mod server;
pub mod tls;
pub mod webpush;

pub use accounting::{Stats, TokenCount, digest};
pub use apns::{ApnsMock, ApnsMockConfig};
pub use control::Received;
pub use faults::FaultConfig;
pub use fcm::{FcmMock, FcmMockConfig};
pub use own_thread::{OnOwnThread, start_on_own_thread};
pub use phones::{ReceiptStats, ReceiptsArgs, ReceiptsConfig};
pub use webpush::{TestSubscription, WebPushMock, WebPushMockConfig};

/// Seconds since the Unix epoch.
pub(crate) fn unix_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The apps file tables (`[apps.<app>.apns]`, `[apps.<app>.fcm]`, see
/// `CLARION_APPS_FILE`) of an app whose Apple and Google are these mocks.
pub fn apps_file_table(app: &str, apns: &ApnsMock, fcm: &FcmMock) -> String {
    format!(
        "[apps.{app}.apns]\ntopic = {topic:?}\nkey_file = {key:?}\nkey_id = {key_id:?}\n\
         team_id = {team:?}\nendpoint = {endpoint:?}\nsandbox_endpoint = {endpoint:?}\n\
         channels_endpoint = {endpoint:?}\nchannels_sandbox_endpoint = {endpoint:?}\n\
         [apps.{app}.fcm]\ncredentials_file = {credentials:?}\nendpoint = {fcm_endpoint:?}\n",
        topic = apns.bundle_id,
        key = apns.key_file.display().to_string(),
        key_id = apns.key_id,
        team = apns.team_id,
        endpoint = apns.endpoint,
        credentials = fcm.credentials_file.display().to_string(),
        fcm_endpoint = fcm.endpoint,
    )
}
