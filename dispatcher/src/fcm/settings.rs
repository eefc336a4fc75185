//! The FCM channel's settings (part of `clarion-dispatcher --help`).

use std::path::PathBuf;

use clap::Args;

/// Firebase Cloud Messaging (HTTP v1).
#[derive(Debug, Clone, Args)]
pub struct FcmSettings {
    /// FCM base URL.
    #[arg(
        id = "fcm_endpoint",
        long = "fcm-endpoint",
        env = "CLARION_FCM_ENDPOINT",
        default_value = "https://fcm.googleapis.com"
    )]
    pub endpoint: String,

    /// Service-account JSON; its `token_uri` says where OAuth2 tokens come from.
    #[arg(
        id = "fcm_credentials_file",
        long = "fcm-credentials-file",
        env = "CLARION_FCM_CREDENTIALS_FILE"
    )]
    pub credentials_file: Option<PathBuf>,

    /// Firebase project (default: the credentials' `project_id`).
    #[arg(
        id = "fcm_project_id",
        long = "fcm-project-id",
        env = "CLARION_FCM_PROJECT_ID"
    )]
    pub project_id: Option<String>,
}
