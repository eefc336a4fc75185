//! One channel per app: the `default` app's, built at start from the
//! single-app settings, and one for each app of the apps file
//! (`CLARION_APPS_FILE`), opened the first time a batch of that app comes
//! (its own pools, credentials and provider token) and opened again when
//! the app's credentials in the file change. A batch of an app the file
//! does not define, or whose app lacks this platform's credentials, is
//! never sent with another app's: it fails with the reason.

use std::collections::HashMap;
use std::sync::Arc;

use clarion_proto::DEFAULT_APP;
use clarion_runtime::apps::{AppCredentials, AppsFile};
use tracing::info;

use crate::channel::{PushChannel, Transport};
use crate::config::Settings;

pub struct AppChannels<C: PushChannel> {
    default: Arc<C>,
    settings: Settings,
    transport: Transport,
    file: AppsFile,
    opened: tokio::sync::Mutex<HashMap<String, (AppCredentials, Arc<C>)>>,
}

impl<C: PushChannel> AppChannels<C> {
    pub fn new(default: Arc<C>, settings: Settings, transport: Transport, file: AppsFile) -> Self {
        Self {
            default,
            settings,
            transport,
            file,
            opened: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The channel of `app`, opened if need be.
    pub async fn get(&self, app: &str) -> Result<Arc<C>, String> {
        if app == DEFAULT_APP {
            return Ok(self.default.clone());
        }
        let Some(credentials) = self.file.get(app) else {
            return Err(format!("app `{app}` is not in the apps file"));
        };
        let Some(settings) = C::for_app(&self.settings, &credentials) else {
            return Err(format!(
                "app `{app}` has no {} credentials in the apps file",
                C::PROVIDER
            ));
        };
        let mut opened = self.opened.lock().await;
        if let Some((built_from, channel)) = opened.get(app)
            && *built_from == credentials
        {
            return Ok(channel.clone());
        }
        let channel = Arc::new(
            C::connect(&settings, self.transport.clone())
                .await
                .map_err(|err| format!("app `{app}`: {err}"))?,
        );
        info!(app, provider = C::PROVIDER, "channel opened for app");
        opened.insert(app.to_owned(), (credentials, channel.clone()));
        Ok(channel)
    }
}
