//! Why the FCM channel cannot be built, or a notification's message prepared.

use crate::http2::PoolError;

use super::auth::AuthError;

#[derive(Debug, thiserror::Error)]
pub enum FcmError {
    #[error("CLARION_FCM_CREDENTIALS_FILE is required for --platform android")]
    MissingCredentials,
    /// An app's `fcm` settings in the apps file cannot be used.
    #[error("fcm: {0}")]
    AppTable(String),
    #[error("no Firebase project: set CLARION_FCM_PROJECT_ID or use credentials with a project_id")]
    NoProject,
    #[error("{0:?} is not a usable Firebase project id")]
    ProjectId(String),
    #[error(transparent)]
    Endpoint(#[from] PoolError),
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error("cannot build the FCM message: {0}")]
    Message(#[from] serde_json::Error),
}
