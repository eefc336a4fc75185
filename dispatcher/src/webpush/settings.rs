//! The web push channel's settings: the `default` app's VAPID key and
//! subject (part of `clarion-dispatcher --help`), the allow-list of push
//! services, and an app's `[apps.<id>.webpush]` table of the apps file.

use std::path::PathBuf;

use clap::Args;
use clarion_proto::AllowedHosts;
use serde::Deserialize;

use super::channel_error::WebPushError;

#[derive(Debug, Clone, Args)]
pub struct WebPushSettings {
    /// The `default` app's VAPID private key (PEM, P-256).
    #[arg(
        id = "vapid_private_key_file",
        long = "vapid-private-key-file",
        env = "CLARION_VAPID_PRIVATE_KEY_FILE"
    )]
    pub private_key_file: Option<PathBuf>,

    /// The `default` app's VAPID subject: `mailto:` or `https:` contact.
    #[arg(id = "vapid_subject", long = "vapid-subject", env = "CLARION_VAPID_SUBJECT")]
    pub subject: Option<String>,

    /// Push-service hosts the dispatcher may post to, checked again before
    /// it connects (see the coordinator's setting of the same name).
    #[arg(
        id = "dispatcher_webpush_allowed_hosts",
        long = "webpush-allowed-hosts",
        env = "CLARION_WEBPUSH_ALLOWED_HOSTS",
        default_value = clarion_proto::web_push::DEFAULT_ALLOWED_HOSTS
    )]
    pub allowed_hosts: AllowedHosts,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AppWebPush {
    vapid_private_key_file: PathBuf,
    vapid_subject: String,
}

impl AppWebPush {
    fn read(table: &toml::Table) -> Result<Self, WebPushError> {
        toml::Value::Table(table.clone())
            .try_into()
            .map_err(|err: toml::de::Error| WebPushError::AppTable(err.message().to_owned()))
    }
}

pub fn check_app(table: &toml::Table) -> Result<(), WebPushError> {
    AppWebPush::read(table).map(drop)
}

impl WebPushSettings {
    pub fn default_configured(&self) -> bool {
        self.private_key_file.is_some() || self.subject.is_some()
    }

    pub fn for_app(&self, table: &toml::Table) -> Result<Self, WebPushError> {
        let app = AppWebPush::read(table)?;
        Ok(Self {
            private_key_file: Some(app.vapid_private_key_file),
            subject: Some(app.vapid_subject),
            allowed_hosts: self.allowed_hosts.clone(),
        })
    }
}
