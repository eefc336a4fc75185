//! Why the web push channel cannot be built, or a push prepared.

use clarion_proto::web_push::AllowedHostsError;

#[derive(Debug, thiserror::Error)]
pub enum WebPushError {
    #[error("CLARION_VAPID_PRIVATE_KEY_FILE and CLARION_VAPID_SUBJECT are required for --platform web")]
    MissingCredentials,
    /// An app's `webpush` settings in the apps file cannot be used.
    #[error("webpush: {0}")]
    AppTable(String),
    #[error("cannot read the VAPID key {path}: {reason}")]
    Key { path: String, reason: String },
    #[error("the VAPID subject {0:?} is not a mailto: or https: URL")]
    Subject(String),
    #[error(transparent)]
    AllowedHosts(#[from] AllowedHostsError),
    #[error("a web batch carries {subscriptions} subscriptions for {tokens} tokens")]
    Misaligned { tokens: usize, subscriptions: usize },
}
