//! One set of API keys, as read from `CLARION_API_KEYS` (`key=scope+scope,...`)
//! or from a keys file (TOML, one `[keys.<name>]` table per key).
//!
//! Keys are kept only as SHA-256 digests and compared in constant time; a
//! key is identified by its name (from the file) and a short fingerprint of
//! its digest, which is what logs, the audit log and the
//! `notifications.api_key_id` column hold — never the key.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::caller::{Caller, LaneSet, Scope};
use super::rate::SendLimit;
use super::topics::TopicRules;
use crate::store::lanes::Lane;

/// One configured key.
#[derive(Clone)]
pub(super) struct KeyEntry {
    digest: [u8; 32],
    /// Fingerprint of the digest (12 hex characters).
    id: String,
    /// The table name in the keys file; the fingerprint for keys from
    /// `CLARION_API_KEYS`.
    name: String,
    scopes: u8,
    /// Sends a minute, when limited (shared by every request with this key).
    send_limit: Option<Arc<SendLimit>>,
    /// The lanes it may send in.
    lanes: LaneSet,
    /// The topics it may send to.
    topics: TopicRules,
    /// The apps it may use; `None`: every app.
    apps: Option<Arc<Vec<String>>>,
}

/// The configured keys. `Debug` shows names and fingerprints only.
#[derive(Clone)]
pub struct KeySet {
    entries: Arc<Vec<KeyEntry>>,
}

impl fmt::Debug for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(
                self.entries
                    .iter()
                    .map(|entry| format!("{} ({})", entry.name, entry.id)),
            )
            .finish()
    }
}

/// The keys file: `[keys.<name>]` tables.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    #[serde(default)]
    keys: BTreeMap<String, FileKey>,
}

/// One `[keys.<name>]` table: the key (`key`) or its SHA-256 digest in hex
/// (`sha256`), its scopes, an optional send rate, the lanes it may send
/// in, the topics it may send to and the apps it may use (all when left
/// out).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileKey {
    sha256: Option<String>,
    key: Option<String>,
    scopes: Vec<String>,
    sends_per_minute: Option<u32>,
    lanes: Option<Vec<String>>,
    topics: Option<Vec<String>>,
    apps: Option<Vec<String>>,
}

impl KeySet {
    /// Parses `key=scope+scope,key2=scope`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut entries: Vec<KeyEntry> = Vec::new();
        for item in spec.split(',').map(str::trim).filter(|item| !item.is_empty()) {
            let (key, scopes) = item
                .split_once('=')
                .ok_or_else(|| format!("API key entry {:?} lacks '=scope'", fingerprint_hint(item)))?;
            check_key(key)?;
            let digest = digest(key);
            let id = key_id(&digest);
            push(
                &mut entries,
                KeyEntry {
                    digest,
                    name: id.clone(),
                    id,
                    scopes: parse_scopes(scopes.split('+'))?,
                    send_limit: None,
                    lanes: LaneSet::ALL,
                    topics: TopicRules::ALL,
                    apps: None,
                },
            )?;
        }
        Self::new(entries)
    }

    /// Parses a keys file. Send limiters of keys whose name and rate are
    /// unchanged from `previous` are carried over, so re-reading the file
    /// does not reset them.
    pub fn from_toml(text: &str, previous: Option<&KeySet>) -> Result<Self, String> {
        let file: KeysFile = toml::from_str(text).map_err(|err| {
            // The parser's message quotes the offending line, which may be
            // a key: say only where it is.
            match err.span() {
                Some(span) => format!(
                    "not a valid keys file (near byte {}): {}",
                    span.start,
                    err.message()
                ),
                None => format!("not a valid keys file: {}", err.message()),
            }
        })?;
        let mut entries: Vec<KeyEntry> = Vec::new();
        for (name, key) in file.keys {
            let digest = match (&key.sha256, &key.key) {
                (Some(hex_digest), None) => parse_digest(hex_digest)
                    .ok_or_else(|| format!("key {name:?}: `sha256` is not 64 hexadecimal characters"))?,
                (None, Some(key)) => {
                    check_key(key).map_err(|err| format!("key {name:?}: {err}"))?;
                    digest(key)
                }
                _ => return Err(format!("key {name:?}: give exactly one of `sha256` and `key`")),
            };
            if key.scopes.is_empty() {
                return Err(format!("key {name:?} has no scopes"));
            }
            let scopes = parse_scopes(key.scopes.iter().map(String::as_str))
                .map_err(|err| format!("key {name:?}: {err}"))?;
            let send_limit = match key.sends_per_minute {
                None => None,
                Some(rate) => Some(match carried_limit(previous, &name, rate) {
                    Some(limit) => limit,
                    None => Arc::new(SendLimit::per_minute(rate).ok_or_else(|| {
                        format!(
                            "key {name:?}: `sends_per_minute` must be at least 1 (leave it out for no limit)"
                        )
                    })?),
                }),
            };
            let can_send = scopes & (Scope::Send.bit() | Scope::Admin.bit()) != 0;
            for (limit, given) in [("lanes", key.lanes.is_some()), ("topics", key.topics.is_some())] {
                if given && !can_send {
                    return Err(format!(
                        "key {name:?} has `{limit}` but cannot send (give it the `send` scope or drop `{limit}`)"
                    ));
                }
            }
            let lanes = match &key.lanes {
                None => LaneSet::ALL,
                Some(names) => parse_lanes(names).map_err(|err| format!("key {name:?}: {err}"))?,
            };
            let topics = match &key.topics {
                None => TopicRules::ALL,
                Some(patterns) => {
                    TopicRules::parse(patterns).map_err(|err| format!("key {name:?}: {err}"))?
                }
            };
            let apps = match key.apps {
                None => None,
                Some(apps) => Some(Arc::new(
                    parse_apps(apps).map_err(|err| format!("key {name:?}: {err}"))?,
                )),
            };
            push(
                &mut entries,
                KeyEntry {
                    id: key_id(&digest),
                    digest,
                    name,
                    scopes,
                    send_limit,
                    lanes,
                    topics,
                    apps,
                },
            )?;
        }
        Self::new(entries)
    }

    /// The well-known development key (`--dev`).
    pub fn development(key: &str) -> Self {
        let digest = digest(key);
        let id = key_id(&digest);
        Self {
            entries: Arc::new(vec![KeyEntry {
                digest,
                name: "development".into(),
                id,
                scopes: Scope::Admin.bit(),
                send_limit: None,
                lanes: LaneSet::ALL,
                topics: TopicRules::ALL,
                apps: None,
            }]),
        }
    }

    fn new(entries: Vec<KeyEntry>) -> Result<Self, String> {
        if entries.is_empty() {
            return Err("no API keys configured".into());
        }
        Ok(Self {
            entries: Arc::new(entries),
        })
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Never true: a key set holds at least one key.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The caller holding `key`, if it is one of ours.
    pub fn identify(&self, key: &str) -> Option<Caller> {
        self.identify_digest(&digest(key))
    }

    /// The caller holding the key whose SHA-256 is `presented`, if it is
    /// one of ours.
    pub fn identify_digest(&self, presented: &[u8; 32]) -> Option<Caller> {
        let mut found = None;
        // Visit every entry whatever matches, comparing digests in constant time.
        for entry in self.entries.iter() {
            if bool::from(entry.digest.ct_eq(presented)) {
                found = Some(entry);
            }
        }
        found.map(|entry| Caller {
            key_id: entry.id.clone(),
            key_name: entry.name.clone(),
            scopes: entry.scopes,
            send_limit: entry.send_limit.clone(),
            lanes: entry.lanes,
            topics: entry.topics.clone(),
            apps: entry.apps.clone(),
        })
    }
}

/// A keys file's `apps` list: app ids, at least one.
fn parse_apps(apps: Vec<String>) -> Result<Vec<String>, String> {
    if apps.is_empty() {
        return Err("`apps` is empty (leave it out for every app)".into());
    }
    for app in &apps {
        clarion_proto::validate_app(app).map_err(|err| err.to_string())?;
    }
    Ok(apps)
}

/// The limiter of `name` in `previous` when its rate is still `rate`.
fn carried_limit(previous: Option<&KeySet>, name: &str, rate: u32) -> Option<Arc<SendLimit>> {
    previous?
        .entries
        .iter()
        .find(|entry| entry.name == name)
        .and_then(|entry| entry.send_limit.clone())
        .filter(|limit| limit.per_minute_rate() == rate)
}

fn push(entries: &mut Vec<KeyEntry>, entry: KeyEntry) -> Result<(), String> {
    if entries.iter().any(|other| other.digest == entry.digest) {
        return Err(format!("API key {} is listed twice", entry.id));
    }
    entries.push(entry);
    Ok(())
}

fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.chars().any(char::is_whitespace) {
        return Err("an API key is empty or holds white space".into());
    }
    Ok(())
}

/// The lanes named in a keys file: at least one, each a known lane.
fn parse_lanes(names: &[String]) -> Result<LaneSet, String> {
    if names.is_empty() {
        return Err("`lanes` is empty (leave it out for every lane)".into());
    }
    names.iter().try_fold(LaneSet::NONE, |set, name| {
        Lane::parse(name)
            .map(|lane| set.with(lane))
            .ok_or_else(|| format!("lane {name:?} is not one of urgent, standard, bulk"))
    })
}

fn parse_scopes<'a>(names: impl Iterator<Item = &'a str>) -> Result<u8, String> {
    let mut bits = 0;
    for name in names {
        bits |= Scope::parse(name.trim())?.bit();
    }
    Ok(bits)
}

fn parse_digest(hex_digest: &str) -> Option<[u8; 32]> {
    let bytes = hex::decode(hex_digest.trim()).ok()?;
    bytes.try_into().ok()
}

/// The SHA-256 of `key`: what a key is stored and recognised by.
pub fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

fn key_id(digest: &[u8; 32]) -> String {
    hex::encode(&digest[..6])
}

/// A malformed entry may be a key: show only its fingerprint in errors.
fn fingerprint_hint(item: &str) -> String {
    format!("key {}", key_id(&digest(item)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::caller::AuthError;

    #[test]
    fn keys_get_their_scopes_and_admin_implies_all() {
        let keys = KeySet::parse("app-k3y=register, desk-k3y=send+register,ops=admin").unwrap();
        let app = keys.identify("app-k3y").unwrap();
        assert!(app.require(Scope::Register).is_ok());
        assert!(matches!(
            app.require(Scope::Send),
            Err(AuthError::Forbidden(Scope::Send))
        ));
        let desk = keys.identify("desk-k3y").unwrap();
        assert!(desk.require(Scope::Send).is_ok() && desk.require(Scope::Register).is_ok());
        assert!(desk.require(Scope::Admin).is_err());
        let ops = keys.identify("ops").unwrap();
        for scope in [Scope::Register, Scope::Send, Scope::Admin] {
            assert!(ops.require(scope).is_ok());
        }
        assert!(keys.identify("app-k3").is_none());
        assert!(keys.identify("").is_none());
    }

    #[test]
    fn key_ids_are_fingerprints_not_keys() {
        let keys = KeySet::parse("s3cret=send").unwrap();
        let caller = keys.identify("s3cret").unwrap();
        assert_eq!(caller.key_id.len(), 12);
        assert!(!format!("{keys:?}").contains("s3cret"));
    }

    #[test]
    fn malformed_specs_are_refused_without_echoing_keys() {
        for spec in ["", "k", "k=", "k=root", "a b=send", "k=send,k=admin"] {
            let err = KeySet::parse(spec).unwrap_err();
            assert!(!err.contains("k="), "{spec}: {err}");
        }
        let err = KeySet::parse("topsecret").unwrap_err();
        assert!(!err.contains("topsecret"), "{err}");
    }

    #[test]
    fn a_keys_file_takes_keys_or_their_digests() {
        let digest = hex::encode(Sha256::digest(b"desk-s3cret"));
        let text = format!(
            r#"
            [keys.newsroom]
            sha256 = "{digest}"
            scopes = ["send"]
            sends_per_minute = 30

            [keys.ops]
            key = "ops-s3cret"
            scopes = ["admin"]
            "#
        );
        let keys = KeySet::from_toml(&text, None).unwrap();
        let desk = keys.identify("desk-s3cret").unwrap();
        assert_eq!(desk.key_name, "newsroom");
        assert_eq!(desk.key_id, digest[..12]);
        assert!(desk.require(Scope::Send).is_ok() && desk.require(Scope::Admin).is_err());
        let ops = keys.identify("ops-s3cret").unwrap();
        assert!(ops.require(Scope::Admin).is_ok());
        assert!(keys.identify(&digest).is_none(), "the digest is not a key");
        assert!(!format!("{keys:?}").contains("s3cret"));
    }

    #[test]
    fn a_key_may_be_limited_to_lanes() {
        let text = r#"
            [keys.marketing]
            key = "m"
            scopes = ["send"]
            lanes = ["bulk"]

            [keys.desk]
            key = "d"
            scopes = ["send"]
            "#;
        let keys = KeySet::from_toml(text, None).unwrap();
        let marketing = keys.identify("m").unwrap();
        assert!(marketing.check_lane(Lane::Bulk).is_ok());
        let refused = marketing.check_lane(Lane::Urgent).unwrap_err().to_string();
        assert!(
            refused.contains("`urgent`") && refused.ends_with("bulk"),
            "{refused}"
        );
        let desk = keys.identify("d").unwrap();
        assert!(Lane::ALL.iter().all(|lane| desk.check_lane(*lane).is_ok()));

        let bad = |lanes: &str| {
            KeySet::from_toml(
                &format!("[keys.x]\nkey = \"x\"\nscopes = [\"send\"]\nlanes = {lanes}\n"),
                None,
            )
            .unwrap_err()
        };
        assert!(bad("[]").contains("empty"));
        let register_only = KeySet::from_toml(
            "[keys.app]\nkey = \"a\"\nscopes = [\"register\"]\nlanes = [\"bulk\"]\n",
            None,
        );
        assert!(register_only.unwrap_err().contains("cannot send"));
        assert!(bad(r#"["breaking"]"#).contains("not one of urgent, standard, bulk"));
    }

    #[test]
    fn keys_may_be_limited_to_topics() {
        let keys = KeySet::from_toml(
            "[keys.sport]\nkey = \"s\"\nscopes = [\"send\"]\ntopics = [\"sport/*\"]\n\
             [keys.desk]\nkey = \"d\"\nscopes = [\"send\"]\n",
            None,
        )
        .unwrap();
        let topics = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let sport = keys.identify("s").unwrap();
        assert!(sport.check_topics(&topics(&["sport/football"])).is_ok());
        let refused = sport
            .check_topics(&topics(&["breaking/uk"]))
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("`breaking/uk`") && refused.contains("allows: sport/*"),
            "{refused}"
        );
        let desk = keys.identify("d").unwrap();
        assert!(desk.check_topics(&topics(&["breaking/uk"])).is_ok());
        let register_only = KeySet::from_toml(
            "[keys.app]\nkey = \"a\"\nscopes = [\"register\"]\ntopics = [\"sport/*\"]\n",
            None,
        );
        assert!(
            register_only
                .unwrap_err()
                .contains("has `topics` but cannot send")
        );
        let malformed = KeySet::from_toml(
            "[keys.x]\nkey = \"x\"\nscopes = [\"send\"]\ntopics = [\"sport*\"]\n",
            None,
        );
        assert!(malformed.unwrap_err().contains("key \"x\": topic pattern"));
    }

    #[test]
    fn a_reread_file_keeps_the_limiter_of_an_unchanged_rate() {
        let text =
            |rate: u32| format!("[keys.desk]\nkey = \"d\"\nscopes = [\"send\"]\nsends_per_minute = {rate}\n");
        let first = KeySet::from_toml(&text(1), None).unwrap();
        assert!(first.identify("d").unwrap().check_send_rate().is_ok());
        let same = KeySet::from_toml(&text(1), Some(&first)).unwrap();
        assert!(
            same.identify("d").unwrap().check_send_rate().is_err(),
            "the limit carries over"
        );
        let faster = KeySet::from_toml(&text(5), Some(&same)).unwrap();
        assert!(
            faster.identify("d").unwrap().check_send_rate().is_ok(),
            "a new rate starts afresh"
        );
    }

    #[test]
    fn bad_keys_files_are_refused_without_echoing_keys() {
        for text in [
            "",
            "[keys.a]\nscopes = [\"send\"]\n",
            "[keys.a]\nkey = \"topsecret\"\nsha256 = \"00\"\nscopes = [\"send\"]\n",
            "[keys.a]\nsha256 = \"abc\"\nscopes = [\"send\"]\n",
            "[keys.a]\nkey = \"topsecret\"\nscopes = []\n",
            "[keys.a]\nkey = \"topsecret\"\nscopes = [\"root\"]\n",
            "[keys.a]\nkey = \"topsecret\"\nscopes = [\"send\"]\ncolour = 1\n",
            "[keys.a]\nkey = \"topsecret\"\nscopes = [\"send\"]\n[keys.b]\nkey = \"topsecret\"\nscopes = [\"send\"]\n",
            "[keys.a]\nkey = topsecret\n",
            "[keys.a]\nkey = \"topsecret\"\nscopes = [\"send\"]\nsends_per_minute = 0\n",
        ] {
            let err = KeySet::from_toml(text, None).unwrap_err();
            assert!(!err.contains("topsecret"), "{text}: {err}");
        }
    }
}
