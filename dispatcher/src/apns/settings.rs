//! The APNs channel's settings: the `default` app's (part of
//! `clarion-dispatcher --help`), and an app's `[apps.<id>.apns]` table of
//! the apps file (or its flat `apns_*` keys).

use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;

use super::channel_error::ApnsError;

/// Apple's production endpoint, for an app that names none.
pub const APPLE_PRODUCTION: &str = "https://api.push.apple.com";
/// Apple's sandbox endpoint, for an app that names none.
pub const APPLE_SANDBOX: &str = "https://api.sandbox.push.apple.com";
/// Apple's production channel-management endpoint (Live Activity
/// broadcast channels), for an app that names none.
pub const APPLE_CHANNELS_PRODUCTION: &str = "https://api-manage-broadcast.push.apple.com:2196";
/// Apple's sandbox channel-management endpoint, for an app that names none.
pub const APPLE_CHANNELS_SANDBOX: &str = "https://api-manage-broadcast.sandbox.push.apple.com:2195";

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

    /// Base URL of Apple's channel-management API (Live Activity broadcast
    /// channels: create, delete) for production; broadcasts themselves go
    /// to the push endpoint.
    #[arg(
        id = "apns_channels_endpoint",
        long = "apns-channels-endpoint",
        env = "CLARION_APNS_CHANNELS_ENDPOINT",
        default_value = APPLE_CHANNELS_PRODUCTION
    )]
    pub channels_endpoint: String,

    /// Base URL of Apple's channel-management API for the sandbox.
    #[arg(
        id = "apns_channels_sandbox_endpoint",
        long = "apns-channels-sandbox-endpoint",
        env = "CLARION_APNS_CHANNELS_SANDBOX_ENDPOINT",
        default_value = APPLE_CHANNELS_SANDBOX
    )]
    pub channels_sandbox_endpoint: String,

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

/// An app's APNs settings in the apps file: all four credentials, and the
/// endpoints (Apple's when absent).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AppApns {
    topic: Option<String>,
    key_file: Option<PathBuf>,
    key_id: Option<String>,
    team_id: Option<String>,
    endpoint: Option<String>,
    sandbox_endpoint: Option<String>,
    channels_endpoint: Option<String>,
    channels_sandbox_endpoint: Option<String>,
}

impl ApnsSettings {
    /// True when some of the `default` app's credentials are given
    /// (incomplete ones stop the start).
    pub fn default_configured(&self) -> bool {
        self.key_file.is_some() || self.key_id.is_some() || self.team_id.is_some() || self.topic.is_some()
    }

    /// These settings with the credentials and endpoints of an app's
    /// `table` in the apps file (the token refresh stays).
    pub fn for_app(&self, table: &toml::Table) -> Result<Self, ApnsError> {
        let app = AppApns::read(table)?;
        Ok(Self {
            endpoint: app.endpoint.unwrap_or_else(|| APPLE_PRODUCTION.to_owned()),
            sandbox_endpoint: app.sandbox_endpoint.unwrap_or_else(|| APPLE_SANDBOX.to_owned()),
            channels_endpoint: app
                .channels_endpoint
                .unwrap_or_else(|| APPLE_CHANNELS_PRODUCTION.to_owned()),
            channels_sandbox_endpoint: app
                .channels_sandbox_endpoint
                .unwrap_or_else(|| APPLE_CHANNELS_SANDBOX.to_owned()),
            key_file: app.key_file,
            key_id: app.key_id,
            team_id: app.team_id,
            topic: app.topic,
            token_refresh_secs: self.token_refresh_secs,
        })
    }
}

impl AppApns {
    /// Reads an app's `apns` table: known fields, the four credentials
    /// all given.
    fn read(table: &toml::Table) -> Result<Self, ApnsError> {
        let app: AppApns = toml::Value::Table(table.clone())
            .try_into()
            .map_err(|err: toml::de::Error| ApnsError::AppTable(err.message().to_owned()))?;
        let credentials = [
            app.topic.is_some(),
            app.key_file.is_some(),
            app.key_id.is_some(),
            app.team_id.is_some(),
        ];
        if credentials.contains(&false) {
            return Err(ApnsError::AppTable(
                "topic, key_file, key_id and team_id (apns_topic, … in the flat form) go together".into(),
            ));
        }
        Ok(app)
    }
}

/// Checks an app's `apns` table in the apps file.
pub fn check_app(table: &toml::Table) -> Result<(), ApnsError> {
    AppApns::read(table).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    fn defaults() -> ApnsSettings {
        ApnsSettings {
            endpoint: "https://default".into(),
            sandbox_endpoint: "https://default-sandbox".into(),
            channels_endpoint: "https://default-channels".into(),
            channels_sandbox_endpoint: "https://default-channels-sandbox".into(),
            key_file: None,
            key_id: None,
            team_id: None,
            topic: None,
            token_refresh_secs: 1800,
        }
    }

    #[test]
    fn an_app_gets_its_credentials_and_apples_endpoints_unless_it_names_its_own() {
        let app = defaults()
            .for_app(&table(
                "topic = \"t\"\nkey_file = \"/k.p8\"\nkey_id = \"K\"\nteam_id = \"T\"",
            ))
            .unwrap();
        assert_eq!(app.topic.as_deref(), Some("t"));
        assert_eq!(app.endpoint, APPLE_PRODUCTION);
        assert_eq!(app.sandbox_endpoint, APPLE_SANDBOX);
        assert_eq!(app.channels_endpoint, APPLE_CHANNELS_PRODUCTION);
        assert_eq!(app.channels_sandbox_endpoint, APPLE_CHANNELS_SANDBOX);
        assert_eq!(app.token_refresh_secs, 1800);
        let own = defaults()
            .for_app(&table(
                "topic = \"t\"\nkey_file = \"/k.p8\"\nkey_id = \"K\"\nteam_id = \"T\"\nendpoint = \"https://mock\"\n\
                 channels_endpoint = \"https://mock:2196\"",
            ))
            .unwrap();
        assert_eq!(own.endpoint, "https://mock");
        assert_eq!(own.channels_endpoint, "https://mock:2196");
        assert_eq!(own.channels_sandbox_endpoint, APPLE_CHANNELS_SANDBOX);
    }

    #[test]
    fn an_incomplete_or_unknown_table_is_refused_with_the_reason() {
        for (text, reason) in [
            ("topic = \"t\"", "go together"),
            ("endpoint = \"https://x\"", "go together"),
            (
                "topic = \"t\"\nkey_file = \"/k.p8\"\nkey_id = \"K\"\nteam_id = \"T\"\nbundle = \"b\"",
                "unknown field `bundle`",
            ),
            ("topic = 1", "invalid type"),
        ] {
            let err = defaults().for_app(&table(text)).unwrap_err().to_string();
            assert!(err.contains(reason), "{text}: {err}");
        }
    }
}
