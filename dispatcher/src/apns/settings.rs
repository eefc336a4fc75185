//! The APNs channel's settings (part of `clarion-dispatcher --help`).

use std::path::PathBuf;

use clap::Args;

/// Apple Push Notification service.
#[derive(Debug, Clone, Args)]
pub struct ApnsSettings {
    /// APNs base URL for production tokens.
    #[arg(
        id = "apns_endpoint",
        long = "apns-endpoint",
        env = "CLARION_APNS_ENDPOINT",
        default_value = "https://api.push.apple.com"
    )]
    pub endpoint: String,

    /// APNs base URL for sandbox (development build) tokens.
    #[arg(
        id = "apns_sandbox_endpoint",
        long = "apns-sandbox-endpoint",
        env = "CLARION_APNS_SANDBOX_ENDPOINT",
        default_value = "https://api.sandbox.push.apple.com"
    )]
    pub sandbox_endpoint: String,

    /// The `.p8` signing key of the provider token.
    #[arg(id = "apns_key_file", long = "apns-key-file", env = "CLARION_APNS_KEY_FILE")]
    pub key_file: Option<PathBuf>,

    /// The key's id (`kid`), 10 characters from Apple's developer portal.
    #[arg(id = "apns_key_id", long = "apns-key-id", env = "CLARION_APNS_KEY_ID")]
    pub key_id: Option<String>,

    /// The Apple developer team id (`iss`).
    #[arg(id = "apns_team_id", long = "apns-team-id", env = "CLARION_APNS_TEAM_ID")]
    pub team_id: Option<String>,

    /// The app's bundle id (`apns-topic`).
    #[arg(id = "apns_topic", long = "apns-topic", env = "CLARION_APNS_TOPIC")]
    pub topic: Option<String>,

    /// Seconds a provider token is reused before a new one is signed
    /// (Apple: refresh between 20 and 60 minutes).
    #[arg(
        long = "apns-token-refresh-secs",
        env = "CLARION_APNS_TOKEN_REFRESH_SECS",
        default_value_t = 2400,
        value_parser = clap::value_parser!(u64).range(1200..=3500)
    )]
    pub token_refresh_secs: u64,
}
