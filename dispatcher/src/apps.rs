//! One channel per app: the `default` app's, built at start from the
//! single-app settings when they are given, and one for each app of the
//! apps file (`CLARION_APPS_FILE`), opened the first time a batch of that
//! app comes (its own pools, credentials and provider token) and opened
//! again when the app's credentials in the file change. A batch of an app
//! this dispatcher has no credentials for is never sent with another
//! app's: it is refused ([`AppError`]), and its notification fails saying
//! which app and platform.

use std::collections::HashMap;
use std::sync::Arc;

use clarion_proto::{BatchRefusal, DEFAULT_APP};
use clarion_runtime::apps::{AppsFile, channel_name};
use tracing::info;

use crate::channel::{PushChannel, Transport};

/// Why a batch's app cannot be served by this dispatcher.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// No credentials for the app on this platform: not `default` with the
    /// single-app settings, not in the apps file with this channel's.
    #[error("app `{app}` has no {provider} credentials here")]
    NotConfigured { app: String, provider: &'static str },
    /// The app's credentials are there but cannot be used.
    #[error("app `{app}`: {error}")]
    Unusable { app: String, error: String },
}

impl AppError {
    /// The fixed failure label of the batch's pushes.
    pub fn label(&self) -> &'static str {
        self.refusal().code()
    }

    /// What the batch's report says of it.
    pub fn refusal(&self) -> BatchRefusal {
        match self {
            AppError::NotConfigured { app, .. } => BatchRefusal::AppNotConfigured { app: app.clone() },
            AppError::Unusable { app, error } => BatchRefusal::AppCredentialsUnusable {
                app: app.clone(),
                error: error.clone(),
            },
        }
    }
}

pub struct AppChannels<C: PushChannel> {
    /// The `default` app's channel; `None` when the single-app settings
    /// give no credentials for this platform.
    default: Option<Arc<C>>,
    /// The channel's settings, which an app's table in the file overrides.
    settings: C::Settings,
    transport: Transport,
    file: AppsFile,
    /// Each app's channel, with the table of the file it was built from.
    opened: tokio::sync::Mutex<HashMap<String, (toml::Table, Arc<C>)>>,
}

impl<C: PushChannel> AppChannels<C> {
    pub fn new(default: Option<Arc<C>>, settings: C::Settings, transport: Transport, file: AppsFile) -> Self {
        Self {
            default,
            settings,
            transport,
            file,
            opened: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Pushes a minute each provider project may send (0: no such quota).
    pub fn quota_per_minute(&self) -> u64 {
        C::quota_per_minute(&self.settings)
    }

    /// The channel of `app`, opened if need be.
    pub async fn get(&self, app: &str) -> Result<Arc<C>, AppError> {
        let not_configured = || AppError::NotConfigured {
            app: app.to_owned(),
            provider: C::PROVIDER,
        };
        if app == DEFAULT_APP {
            return self.default.clone().ok_or_else(not_configured);
        }
        let credentials = self.file.get(app).ok_or_else(not_configured)?;
        let table = credentials
            .channel(channel_name(C::PLATFORM))
            .ok_or_else(not_configured)?;
        let unusable = |error: C::Error| AppError::Unusable {
            app: app.to_owned(),
            error: error.to_string(),
        };
        let mut opened = self.opened.lock().await;
        if let Some((built_from, channel)) = opened.get(app)
            && built_from == table
        {
            return Ok(channel.clone());
        }
        let settings = C::for_app(&self.settings, table).map_err(unusable)?;
        let channel = Arc::new(
            C::connect(&settings, self.transport.clone())
                .await
                .map_err(unusable)?,
        );
        info!(app, provider = C::PROVIDER, "channel opened for app");
        opened.insert(app.to_owned(), (table.clone(), channel.clone()));
        Ok(channel)
    }
}
