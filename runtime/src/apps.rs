//! The apps file (`CLARION_APPS_FILE`): one `[apps.<id>]` table per app
//! beside `default` (which the single-app settings define), with one
//! sub-table per channel the app is served on (`[apps.<id>.apns]`,
//! `[apps.<id>.fcm]`). It may be a mounted Kubernetes Secret: it is
//! read at start (a bad file stops the start), then read again when asked
//! for an app at most every [`RECHECK`] — every [`RECHECK_ON_MISS`] when
//! asked for one it did not have — so an app added to the file is served
//! without a restart. A changed file that cannot be read or parsed
//! keeps the apps read before and logs an error.
//!
//! ```toml
//! [apps.puzzles.apns]
//! topic = "com.example.puzzles"
//! key_file = "/secrets/puzzles/AuthKey.p8"
//! key_id = "ABC123DEFG"
//! team_id = "TEAM123456"
//!
//! [apps.puzzles.fcm]
//! credentials_file = "/secrets/puzzles/service-account.json"
//! ```
//!
//! The older flat form, `apns_topic = …` / `fcm_credentials_file = …` in
//! `[apps.<id>]`, still parses: a key `<channel>_<field>` is the field
//! `<field>` of the channel's table. One channel's settings are given in
//! one form: an app with both `[apps.<id>.apns]` and `apns_*` keys is
//! refused. This file knows the channels' names only; what a channel's
//! table holds is the channel's to check (the dispatcher passes its
//! checker to [`AppsFile::open_checked`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clarion_proto::Platform;
use clarion_proto::app::{DEFAULT_APP, validate_app};
use tracing::{error, info};

/// Shortest time between two reads of the file.
pub const RECHECK: Duration = Duration::from_secs(2);
/// Shortest time between two reads when asked for an app the last reading
/// did not have (one just added must not wait for [`RECHECK`]).
pub const RECHECK_ON_MISS: Duration = Duration::from_millis(100);

/// The name of the channel serving `platform`: its table in an app
/// (`[apps.<id>.<channel>]`) and the prefix of its flat keys.
pub fn channel_name(platform: Platform) -> &'static str {
    platform.channel()
}

/// One app's settings: a table of settings per channel it is served on,
/// as the file gives them (the channel parses its own).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppCredentials {
    channels: BTreeMap<String, toml::Table>,
}

impl AppCredentials {
    /// The app's settings for `channel` (see [`channel_name`]); `None`
    /// when the app is not served on it.
    pub fn channel(&self, channel: &str) -> Option<&toml::Table> {
        self.channels.get(channel)
    }

    /// True when the app has settings for `platform`'s channel.
    pub fn serves(&self, platform: Platform) -> bool {
        self.channel(channel_name(platform)).is_some()
    }

    /// Reads an app's `[apps.<id>]` table: sub-tables per channel, or flat
    /// `<channel>_<field>` keys, one form per channel.
    fn from_table(table: toml::Table) -> Result<Self, String> {
        let known = |name: &str| Platform::ALL.iter().any(|p| channel_name(*p) == name);
        let mut tables = BTreeMap::new();
        let mut flat: BTreeMap<String, toml::Table> = BTreeMap::new();
        for (key, value) in table {
            match value {
                toml::Value::Table(sub) if known(&key) => {
                    tables.insert(key, sub);
                }
                value => {
                    let (channel, field) = key
                        .split_once('_')
                        .filter(|(channel, field)| known(channel) && !field.is_empty())
                        .ok_or_else(|| {
                            format!(
                                "unknown field `{key}`, expected a channel table ({}) or its flat keys",
                                channel_list()
                            )
                        })?;
                    flat.entry(channel.to_owned())
                        .or_default()
                        .insert(field.to_owned(), value);
                }
            }
        }
        for channel in flat.keys() {
            if tables.contains_key(channel) {
                return Err(format!(
                    "its {channel} settings are given both as a `{channel}` table and as flat `{channel}_*` keys: use one form"
                ));
            }
        }
        tables.extend(flat);
        if tables.is_empty() {
            return Err(format!("it has settings for no channel ({})", channel_list()));
        }
        Ok(Self { channels: tables })
    }
}

fn channel_list() -> String {
    Platform::ALL
        .iter()
        .map(|p| channel_name(*p))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The apps of one reading of the file.
pub type AppTable = BTreeMap<String, AppCredentials>;

/// Checks an app's channel settings beyond the file's shape (the channels'
/// own rules); its error is shown as the reason the app is refused.
pub type AppCheck = fn(&AppCredentials) -> Result<(), String>;

/// Parses the file's text (its shape only: see [`parse_checked`]).
pub fn parse(text: &str) -> Result<AppTable, String> {
    parse_checked(text, None)
}

/// Parses the file's text, and checks each app with `check`.
pub fn parse_checked(text: &str, check: Option<AppCheck>) -> Result<AppTable, String> {
    let mut root: toml::Table = text.parse().map_err(|err: toml::de::Error| err.to_string())?;
    let apps = match root.remove("apps") {
        None => toml::Table::new(),
        Some(toml::Value::Table(apps)) => apps,
        Some(_) => return Err("`apps` must be a table of apps".into()),
    };
    if let Some(key) = root.keys().next() {
        return Err(format!("unknown field `{key}`, expected `apps`"));
    }
    let mut table = AppTable::new();
    for (id, app) in apps {
        validate_app(&id).map_err(|err| err.to_string())?;
        if id == DEFAULT_APP {
            return Err("app `default` is defined by the single-app settings (CLARION_APNS_*, CLARION_FCM_*), not in the file".into());
        }
        let toml::Value::Table(app) = app else {
            return Err(format!("app `{id}`: must be a table (`[apps.{id}]`)"));
        };
        let app = AppCredentials::from_table(app).map_err(|err| format!("app `{id}`: {err}"))?;
        if let Some(check) = check {
            check(&app).map_err(|err| format!("app `{id}`: {err}"))?;
        }
        table.insert(id, app);
    }
    Ok(table)
}

/// The apps file, read again when looked at after [`RECHECK`].
pub struct AppsFile {
    path: Option<PathBuf>,
    /// The channels' checks, applied to every reading.
    check: Option<AppCheck>,
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
    /// Reads `path` (none: only the default app exists), checking the
    /// file's shape only.
    pub fn open(path: Option<&Path>) -> Result<Self, String> {
        Self::open_checked(path, None)
    }

    /// Reads `path`, and checks every app with `check` at each reading (a
    /// reading with an app `check` refuses is not valid).
    pub fn open_checked(path: Option<&Path>, check: Option<AppCheck>) -> Result<Self, String> {
        let (text, apps) = match path {
            Some(path) => read(path, check)?,
            None => (String::new(), AppTable::new()),
        };
        if let Some(path) = path {
            info!(path = %path.display(), apps = apps.len(), "apps file read");
        }
        Ok(Self {
            path: path.map(Path::to_path_buf),
            check,
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
                match parse_checked(&text, self.check) {
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

fn read(path: &Path, check: Option<AppCheck>) -> Result<(String, AppTable), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read the apps file {}: {err}", path.display()))?;
    let apps =
        parse_checked(&text, check).map_err(|err| format!("the apps file {}: {err}", path.display()))?;
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

    /// The same two apps in the sub-table form.
    const TWO_APPS_IN_TABLES: &str = r#"
[apps.puzzles.apns]
topic = "com.example.puzzles"
key_file = "/k.p8"
key_id = "K"
team_id = "T"

[apps.beta.fcm]
credentials_file = "/sa.json"
"#;

    #[test]
    fn an_app_may_serve_one_platform() {
        let apps = parse(TWO_APPS).unwrap();
        assert!(apps["puzzles"].serves(Platform::Ios) && !apps["puzzles"].serves(Platform::Android));
        assert!(apps["beta"].serves(Platform::Android) && !apps["beta"].serves(Platform::Ios));
    }

    #[test]
    fn the_flat_keys_and_the_channel_tables_read_the_same() {
        let flat = parse(TWO_APPS).unwrap();
        assert_eq!(flat, parse(TWO_APPS_IN_TABLES).unwrap());
        let apns = flat["puzzles"].channel("apns").unwrap();
        assert_eq!(apns["topic"].as_str(), Some("com.example.puzzles"));
        assert_eq!(apns.len(), 4);
        assert_eq!(
            flat["beta"].channel("fcm").unwrap()["credentials_file"].as_str(),
            Some("/sa.json")
        );
    }

    #[test]
    fn each_channel_may_use_its_own_form() {
        let apps =
            parse("[apps.a]\napns_topic = \"t\"\n[apps.a.fcm]\ncredentials_file = \"/sa.json\"").unwrap();
        assert!(apps["a"].serves(Platform::Ios) && apps["a"].serves(Platform::Android));
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        for (text, reason) in [
            (
                "[apps.default]\nfcm_credentials_file = \"/x\"",
                "single-app settings",
            ),
            ("[apps.Bad]\nfcm_credentials_file = \"/x\"", "not an app id"),
            ("[apps.a]\n", "settings for no channel"),
            (
                "[apps.a]\nweb_endpoint = \"https://x\"",
                "unknown field `web_endpoint`",
            ),
            ("[apps.a]\ntopic = \"t\"", "unknown field `topic`"),
            ("[apps.a]\napns = \"t\"", "unknown field `apns`"),
            ("apps = 1", "table of apps"),
            ("[apps]\na = 1", "must be a table"),
            ("[other]\na = 1", "unknown field `other`"),
            (
                "[apps.a]\napns_topic = \"t\"\n[apps.a.apns]\nkey_id = \"K\"",
                "both as a `apns` table and as flat `apns_*` keys",
            ),
            ("not toml [", "TOML parse error"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(reason), "{text}: {err}");
        }
    }

    #[test]
    fn the_channels_check_refuses_an_app_by_name() {
        fn no_sandbox(app: &AppCredentials) -> Result<(), String> {
            match app.channel("apns").and_then(|apns| apns.get("sandbox_endpoint")) {
                Some(_) => Err("no sandbox here".into()),
                None => Ok(()),
            }
        }
        assert!(parse_checked(TWO_APPS, Some(no_sandbox)).is_ok());
        let err = parse_checked("[apps.a.apns]\nsandbox_endpoint = \"x\"", Some(no_sandbox)).unwrap_err();
        assert_eq!(err, "app `a`: no sandbox here");
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
        std::fs::write(&path, TWO_APPS_IN_TABLES).unwrap();
        file.state.lock().unwrap().checked -= RECHECK;
        assert_eq!(
            file.serving(Platform::Ios),
            ["puzzles"],
            "the same apps in tables"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
