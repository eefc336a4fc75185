//! The FCM channel's settings: the `default` app's (part of
//! `clarion-dispatcher --help`), and an app's `[apps.<id>.fcm]` table of
//! the apps file (or its flat `fcm_*` keys).

use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;

use super::channel_error::FcmError;

/// Google's FCM endpoint, for an app that names none.
pub const GOOGLE_FCM: &str = "https://fcm.googleapis.com";

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

    /// FCM messages a minute each Firebase project may send (Google's
    /// default quota: 600,000), shared by every Android dispatcher replica:
    /// each paces itself at 95% of it divided by the replicas the broker
    /// counts on the Android queue, and slows down on QUOTA_EXCEEDED.
    /// 0 = no pacing. Ignored by iOS dispatchers.
    #[arg(
        id = "fcm_quota_per_minute",
        long = "fcm-quota-per-minute",
        env = "CLARION_FCM_QUOTA_PER_MINUTE",
        default_value_t = 600_000
    )]
    pub quota_per_minute: u64,
}

/// An app's FCM settings in the apps file: its service account, and
/// optionally its project and endpoint (Google's when absent).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AppFcm {
    credentials_file: PathBuf,
    project_id: Option<String>,
    endpoint: Option<String>,
}

impl AppFcm {
    fn read(table: &toml::Table) -> Result<Self, FcmError> {
        toml::Value::Table(table.clone())
            .try_into()
            .map_err(|err: toml::de::Error| FcmError::AppTable(err.message().to_owned()))
    }
}

/// Checks an app's `fcm` table in the apps file.
pub fn check_app(table: &toml::Table) -> Result<(), FcmError> {
    AppFcm::read(table).map(drop)
}

impl FcmSettings {
    /// True when the `default` app's service account is given.
    pub fn default_configured(&self) -> bool {
        self.credentials_file.is_some()
    }

    /// These settings with the credentials, project and endpoint of an
    /// app's `table` in the apps file (the quota stays).
    pub fn for_app(&self, table: &toml::Table) -> Result<Self, FcmError> {
        let app = AppFcm::read(table)?;
        Ok(Self {
            endpoint: app.endpoint.unwrap_or_else(|| GOOGLE_FCM.to_owned()),
            credentials_file: Some(app.credentials_file),
            project_id: app.project_id,
            quota_per_minute: self.quota_per_minute,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    fn defaults() -> FcmSettings {
        FcmSettings {
            endpoint: "https://default".into(),
            credentials_file: None,
            project_id: Some("default-project".into()),
            quota_per_minute: 1000,
        }
    }

    #[test]
    fn an_app_gets_its_credentials_and_googles_endpoint_unless_it_names_its_own() {
        let app = defaults()
            .for_app(&table("credentials_file = \"/sa.json\""))
            .unwrap();
        assert_eq!(
            app.credentials_file.as_deref(),
            Some(std::path::Path::new("/sa.json"))
        );
        assert_eq!(app.endpoint, GOOGLE_FCM);
        assert_eq!(
            app.project_id, None,
            "the default app's project is not another app's"
        );
        assert_eq!(app.quota_per_minute, 1000);
        let own = defaults()
            .for_app(&table(
                "credentials_file = \"/sa.json\"\nendpoint = \"https://mock\"\nproject_id = \"p\"",
            ))
            .unwrap();
        assert_eq!(
            (own.endpoint.as_str(), own.project_id.as_deref()),
            ("https://mock", Some("p"))
        );
    }

    #[test]
    fn an_incomplete_or_unknown_table_is_refused_with_the_reason() {
        for (text, reason) in [
            ("project_id = \"p\"", "missing field `credentials_file`"),
            (
                "credentials_file = \"/sa.json\"\ncredentials = \"/x\"",
                "unknown field `credentials`",
            ),
        ] {
            let err = check_app(&table(text)).unwrap_err().to_string();
            assert!(err.contains(reason), "{text}: {err}");
        }
    }
}
