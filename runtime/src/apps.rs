//! The apps file (`CLARION_APPS_FILE`): one `[apps.<id>]` table per app
//! beside `default` (which the single-app settings define), with the app's
//! APNs and FCM credentials. It may be a mounted Kubernetes Secret: it is
//! read at start (a bad file stops the start), then read again when asked
//! for an app at most every [`RECHECK`] — every [`RECHECK_ON_MISS`] when
//! asked for one it did not have — so an app added to the file is served
//! without a restart. A changed file that cannot be read or parsed
//! keeps the apps read before and logs an error.
//!
//! ```toml
//! [apps.puzzles]
//! apns_topic = "com.example.puzzles"
//! apns_key_file = "/secrets/puzzles/AuthKey.p8"
//! apns_key_id = "ABC123DEFG"
//! apns_team_id = "TEAM123456"
//! fcm_credentials_file = "/secrets/puzzles/service-account.json"
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clarion_proto::Platform;
use clarion_proto::app::{DEFAULT_APP, validate_app};
use serde::Deserialize;
use tracing::{error, info};

/// Shortest time between two reads of the file.
pub const RECHECK: Duration = Duration::from_secs(2);
/// Shortest time between two reads when asked for an app the last reading
/// did not have (one just added must not wait for [`RECHECK`]).
pub const RECHECK_ON_MISS: Duration = Duration::from_millis(100);

/// One app's credentials. An app may serve one platform only: the APNs
/// fields all together, or none; the FCM credentials file, or not.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppCredentials {
    pub apns_topic: Option<String>,
    pub apns_key_file: Option<PathBuf>,
    pub apns_key_id: Option<String>,
    pub apns_team_id: Option<String>,
    /// APNs production base URL (Apple's when absent).
    pub apns_endpoint: Option<String>,
    /// APNs sandbox base URL (Apple's when absent).
    pub apns_sandbox_endpoint: Option<String>,
    pub fcm_credentials_file: Option<PathBuf>,
    /// FCM project (the service account's when absent).
    pub fcm_project_id: Option<String>,
    /// FCM base URL (Google's when absent).
    pub fcm_endpoint: Option<String>,
}

impl AppCredentials {
    /// True when the app has APNs credentials.
    pub fn serves_apns(&self) -> bool {
        self.apns_topic.is_some()
    }

    /// True when the app has FCM credentials.
    pub fn serves_fcm(&self) -> bool {
        self.fcm_credentials_file.is_some()
    }

    /// True when the app has credentials for `platform`.
    pub fn serves(&self, platform: Platform) -> bool {
        match platform {
            Platform::Ios => self.serves_apns(),
            Platform::Android => self.serves_fcm(),
        }
    }

    fn check(&self) -> Result<(), String> {
        let apns = [
            self.apns_topic.is_some(),
            self.apns_key_file.is_some(),
            self.apns_key_id.is_some(),
            self.apns_team_id.is_some(),
        ];
        if apns.contains(&true) && apns.contains(&false) {
            return Err("apns_topic, apns_key_file, apns_key_id and apns_team_id go together".into());
        }
        if !self.serves_apns() && !self.serves_fcm() {
            return Err(
                "it has neither APNs (apns_topic, …) nor FCM (fcm_credentials_file) credentials".into(),
            );
        }
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileContent {
    #[serde(default)]
    apps: BTreeMap<String, AppCredentials>,
}

/// The apps of one reading of the file.
pub type AppTable = BTreeMap<String, AppCredentials>;

/// Parses the file's text.
pub fn parse(text: &str) -> Result<AppTable, String> {
    let content: FileContent = toml::from_str(text).map_err(|err| err.to_string())?;
    for (id, app) in &content.apps {
        validate_app(id).map_err(|err| err.to_string())?;
        if id == DEFAULT_APP {
            return Err("app `default` is defined by the single-app settings (CLARION_APNS_*, CLARION_FCM_*), not in the file".into());
        }
        app.check().map_err(|err| format!("app `{id}`: {err}"))?;
    }
    Ok(content.apps)
}

/// The apps file, read again when looked at after [`RECHECK`].
pub struct AppsFile {
    path: Option<PathBuf>,
    state: Mutex<Reading>,
}

struct Reading {
    checked: Instant,
    text: String,
    apps: AppTable,
    /// The last read failed (logged once, not on every recheck).
    unreadable: bool,
}

impl AppsFile {
    /// Reads `path` (none: only the default app exists).
    pub fn open(path: Option<&Path>) -> Result<Self, String> {
        let (text, apps) = match path {
            Some(path) => read(path)?,
            None => (String::new(), AppTable::new()),
        };
        if let Some(path) = path {
            info!(path = %path.display(), apps = apps.len(), "apps file read");
        }
        Ok(Self {
            path: path.map(Path::to_path_buf),
            state: Mutex::new(Reading {
                checked: Instant::now(),
                text,
                apps,
                unreadable: false,
            }),
        })
    }

    /// The credentials of `app` as the file has them now; `None` for an
    /// app the file does not define (and for `default`).
    pub fn get(&self, app: &str) -> Option<AppCredentials> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh(&mut state, RECHECK);
        if !state.apps.contains_key(app) {
            self.refresh(&mut state, RECHECK_ON_MISS);
        }
        state.apps.get(app).cloned()
    }

    /// The apps there are now: `default` and those of the file.
    pub fn ids(&self) -> Vec<String> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh(&mut state, RECHECK);
        std::iter::once(DEFAULT_APP.to_owned())
            .chain(state.apps.keys().cloned())
            .collect()
    }

    /// The apps of the file that have credentials for `platform` now
    /// (`default` aside: the single-app settings define it).
    pub fn serving(&self, platform: Platform) -> Vec<String> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh(&mut state, RECHECK);
        state
            .apps
            .iter()
            .filter(|(_, app)| app.serves(platform))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// True when `app` is `default` or defined by the file now.
    pub fn knows(&self, app: &str) -> bool {
        app == DEFAULT_APP || self.get(app).is_some()
    }

    fn refresh(&self, state: &mut Reading, after: Duration) {
        let Some(path) = &self.path else { return };
        if state.checked.elapsed() < after {
            return;
        }
        state.checked = Instant::now();
        let read = std::fs::read_to_string(path);
        let was_unreadable = std::mem::replace(&mut state.unreadable, read.is_err());
        match read {
            Ok(text) if text == state.text => {}
            Ok(text) => {
                match parse(&text) {
                    Ok(apps) => {
                        info!(path = %path.display(), apps = apps.len(), "apps file changed; its apps are in force");
                        state.apps = apps;
                    }
                    Err(err) => {
                        error!(path = %path.display(), error = %err, "the apps file changed but is not valid; the apps read before stay in force");
                    }
                }
                state.text = text;
            }
            Err(err) if !was_unreadable => {
                error!(path = %path.display(), error = %err, "cannot read the apps file; the apps read before stay in force");
            }
            Err(_) => {}
        }
    }
}

fn read(path: &Path) -> Result<(String, AppTable), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read the apps file {}: {err}", path.display()))?;
    let apps = parse(&text).map_err(|err| format!("the apps file {}: {err}", path.display()))?;
    Ok((text, apps))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_APPS: &str = r#"
[apps.puzzles]
apns_topic = "com.example.puzzles"
apns_key_file = "/k.p8"
apns_key_id = "K"
apns_team_id = "T"

[apps.beta]
fcm_credentials_file = "/sa.json"
"#;

    #[test]
    fn an_app_may_serve_one_platform() {
        let apps = parse(TWO_APPS).unwrap();
        assert!(apps["puzzles"].serves_apns() && !apps["puzzles"].serves_fcm());
        assert!(apps["beta"].serves_fcm() && !apps["beta"].serves_apns());
        assert!(apps["puzzles"].serves(Platform::Ios) && !apps["puzzles"].serves(Platform::Android));
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        for (text, reason) in [
            (
                "[apps.default]\nfcm_credentials_file = \"/x\"",
                "single-app settings",
            ),
            ("[apps.Bad]\nfcm_credentials_file = \"/x\"", "not an app id"),
            ("[apps.a]\napns_topic = \"t\"", "go together"),
            ("[apps.a]\napns_endpoint = \"https://x\"", "neither"),
            ("[apps.a]\nfcm_credentials = \"/x\"", "unknown field"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(reason), "{text}: {err}");
        }
    }

    #[test]
    fn an_app_added_to_the_file_is_known_after_the_recheck() {
        let dir = std::env::temp_dir().join(format!("clarion-apps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("apps.toml");
        std::fs::write(&path, "").unwrap();
        let file = AppsFile::open(Some(&path)).unwrap();
        assert!(file.knows("default") && !file.knows("puzzles"));
        std::fs::write(&path, TWO_APPS).unwrap();
        file.state.lock().unwrap().checked -= RECHECK;
        assert!(file.knows("puzzles"));
        assert_eq!(file.ids(), ["default", "beta", "puzzles"]);
        assert_eq!(file.serving(Platform::Ios), ["puzzles"]);
        assert_eq!(file.serving(Platform::Android), ["beta"]);
        std::fs::write(&path, "not toml [").unwrap();
        file.state.lock().unwrap().checked -= RECHECK;
        assert!(file.knows("puzzles"), "a broken file keeps the apps read before");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
