//! Why the APNs channel cannot be built, or a notification's push prepared.

use crate::http2::PoolError;

use super::live_activity::StartPushError;
use super::payload::PayloadError;
use super::token::TokenError;

#[derive(Debug, thiserror::Error)]
pub enum ApnsError {
    /// A credential the channel cannot do without (the setting's name).
    #[error("{0} is required for --platform ios")]
    Missing(&'static str),
    #[error("CLARION_APNS_TOPIC is not a valid header value")]
    Topic,
    /// An app's `apns` settings in the apps file cannot be used.
    #[error("apns: {0}")]
    AppTable(String),
    #[error(transparent)]
    Endpoint(#[from] PoolError),
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error(transparent)]
    Payload(#[from] PayloadError),
    #[error(transparent)]
    StartPush(#[from] StartPushError),
}
