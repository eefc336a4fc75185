//! Mock APNs and FCM servers that speak the real protocols (HTTP/2 over TLS,
//! provider-token JWTs, OAuth2 service-account assertions, Apple's and
//! Google's error bodies), with fault injection and per-token accounting
//! behind a small control API. They stand in for Apple and Google in the
//! tests, the demo and the benchmark; nothing else is mocked.

use std::time::{SystemTime, UNIX_EPOCH};

pub mod accounting;
pub mod apns;
pub mod control;
pub mod faults;
pub mod fcm;
pub mod own_thread;
pub mod server;
pub mod tls;

pub use accounting::{Stats, TokenCount, digest};
pub use apns::{ApnsMock, ApnsMockConfig};
pub use faults::FaultConfig;
pub use fcm::{FcmMock, FcmMockConfig};
pub use own_thread::{OnOwnThread, start_on_own_thread};

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
