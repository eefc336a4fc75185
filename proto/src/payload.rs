//! The notification an editor sends, and its validation against the topic
//! rules and the providers' payload limits (APNs 4096 bytes, FCM 4000 bytes).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::locale::{LocaleError, LocalizedText, MAX_LOCALIZATIONS, normalize_locale};
use crate::presentation::{InterruptionLevel, PushType, sound_field};
use crate::topic::{TopicError, validate_topic};

mod presentation_rules;
mod web_rules;

pub use web_rules::{DECLARATIVE_WEB_PUSH, WEB_ENCRYPTION_OVERHEAD, WEB_MAX_PAYLOAD_BYTES, WebOptions};

/// Largest APNs payload Apple accepts for a regular alert, in bytes.
pub const APNS_MAX_PAYLOAD_BYTES: usize = 4096;
/// Largest FCM message payload (notification + data), in bytes.
pub const FCM_MAX_PAYLOAD_BYTES: usize = 4000;
/// Most topics one notification may target.
pub const MAX_TOPICS_PER_NOTIFICATION: usize = 20;
/// Longest time-to-live FCM accepts (four weeks); APNs takes the same bound.
pub const MAX_TTL_SECONDS: u32 = 28 * 24 * 3600;
/// Time-to-live when the sender names none: an hour-old alert is no longer news.
pub const DEFAULT_TTL_SECONDS: u32 = 3600;
/// Longest collapse key, in bytes (APNs' `apns-collapse-id` limit).
pub const MAX_COLLAPSE_KEY_BYTES: usize = 64;
/// Longest `link`, in bytes.
pub const MAX_URL_BYTES: usize = 2048;
/// Longest `image_url`, in bytes: it travels twice in an FCM message
/// (`notification.image` and `data.image_url`), so at the `link` limit it
/// alone would break FCM's 4000 bytes.
pub const MAX_IMAGE_URL_BYTES: usize = 1024;

/// Text fields (`title`, `body`, `data` keys and values): no C0 control
/// character but tab, newline and carriage return, and no DEL. As regular
/// expressions (ECMA 262, Python and Rust read them alike) for the OpenAPI
/// description; the validation below agrees with them.
pub const TEXT_PATTERN: &str = r"^[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F]*$";
/// `body`: text holding at least one character that is not white space.
pub const BODY_PATTERN: &str = r"^[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F]*[^\x00-\x20\x7F\x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000][^\x00-\x08\x0B\x0C\x0E-\x1F\x7F]*$";
/// `collapse_key`: printable ASCII (it becomes the `apns-collapse-id` header).
pub const COLLAPSE_KEY_PATTERN: &str = r"^[\x20-\x7E]*$";
/// `link` and `image_url`: an absolute http(s) URL of ASCII characters — a
/// host name of letters, digits, `-` (never doubled) and dots whose last
/// label starts with a letter, an optional port up to 65535, then path,
/// query and fragment of RFC 3986 characters (non-ASCII percent-encoded).
pub const URL_PATTERN: &str = concat!(
    r"^https?://(?:[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*\.)*[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*",
    r"(?::(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?",
    r"(?:/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*)?",
    r"(?:\?[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*)?",
    r"(?:#[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*)?$",
);
/// `data` keys that are refused (compared without regard to case).
pub const RESERVED_DATA_KEY_PATTERN: &str = concat!(
    r"^(?:[Aa][Pp][Ss]|[Ll][Ii][Nn][Kk]|[Ii][Mm][Aa][Gg][Ee]_[Uu][Rr][Ll]|[Ff][Rr][Oo][Mm]",
    r"|[Nn][Oo][Tt][Ii][Ff][Ii][Cc][Aa][Tt][Ii][Oo][Nn](?:_[Ii][Dd])?|[Mm][Ee][Ss][Ss][Aa][Gg][Ee]_[Tt][Yy][Pp][Ee]",
    r"|[Gg][Oo][Oo][Gg][Ll][Ee]\..*|[Gg][Cc][Mm]\..*)$",
);
/// The custom key every push carries beside `aps` (APNs) or in `data`
/// (FCM): the notification's id, so the app can say which notification it
/// received or opened (`POST /api/v1/receipts`). Reserved: a sender's
/// `data` cannot name it.
pub const NOTIFICATION_ID_KEY: &str = "notification_id";

/// The compiled [`URL_PATTERN`].
static URL_REGEX: std::sync::LazyLock<Option<regex::Regex>> =
    std::sync::LazyLock::new(|| regex::Regex::new(URL_PATTERN).ok());

/// Custom `data` keys that would collide with the providers' own fields or
/// with the keys Clarion fills itself.
const RESERVED_DATA_KEYS: [&str; 7] = [
    "aps",
    "link",
    "image_url",
    NOTIFICATION_ID_KEY,
    "from",
    "notification",
    "message_type",
];
const RESERVED_DATA_PREFIXES: [&str; 2] = ["google.", "gcm."];

/// Delivery priority: `high` wakes the device now, `normal` lets the OS batch it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    #[default]
    High,
    Normal,
}

/// One breaking-news alert (or silent update) for one or more topics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    /// The app whose devices get it, through that app's credentials.
    #[serde(
        default = "crate::app::default_app",
        skip_serializing_if = "crate::app::is_default_app"
    )]
    pub app: String,
    pub topics: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Empty only for a background push.
    #[serde(default)]
    pub body: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_url: Option<String>,
    #[serde(default)]
    pub priority: Priority,
    #[serde(default = "default_ttl")]
    pub ttl_seconds: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collapse_key: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub data: BTreeMap<String, String>,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default, skip_serializing_if = "is_alert")]
    pub push_type: PushType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub badge: Option<u32>,
    /// Absent: the default sound; `Some(None)` (`null`): silent.
    #[serde(
        default,
        deserialize_with = "sound_field",
        skip_serializing_if = "Option::is_none"
    )]
    pub sound: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruption_level: Option<InterruptionLevel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relevance_score: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub android_channel_id: Option<String>,
    /// Texts per language tag (lower case once validated); a device gets
    /// the most specific match, else `title` and `body`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub localizations: BTreeMap<String, LocalizedText>,
    /// How browsers get it (web push): the Declarative Web Push form or
    /// the service worker's JSON (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web: Option<WebOptions>,
    /// The send is in the `bulk` lane (briefings, marketing): set by the
    /// coordinator's job relay from the lane it releases the job in, never
    /// read from the API. Web push sends it at `Urgency: low`, so a
    /// browser on battery may hold it back.
    #[serde(default, skip_serializing_if = "is_false")]
    pub bulk: bool,
    /// A Live Activity's start push (issue 38): set by the coordinator when
    /// it accepts an activity's start, never read from the API. It sends
    /// only to iOS `push_to_start` tokens of its `attributes_type`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_activity: Option<crate::live_activity::LiveActivityStart>,
}

fn is_false(flag: &bool) -> bool {
    !*flag
}

fn is_alert(push_type: &PushType) -> bool {
    push_type.is_alert()
}

fn default_ttl() -> u32 {
    DEFAULT_TTL_SECONDS
}

/// Why a notification was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PayloadError {
    #[error("a notification needs at least one topic")]
    NoTopics,
    #[error("a notification targets at most {MAX_TOPICS_PER_NOTIFICATION} topics; got {0}")]
    TooManyTopics(usize),
    #[error(transparent)]
    Topic(#[from] TopicError),
    #[error(transparent)]
    App(#[from] crate::app::AppIdError),
    #[error("the body is empty; an alert needs text")]
    EmptyBody,
    #[error("a background push shows nothing, so it takes no {0}; send an alert to show it")]
    NotForBackground(&'static str),
    #[error("badge is {0}; the largest badge is {max}", max = crate::presentation::MAX_BADGE)]
    BadgeTooLarge(u32),
    #[error("relevance_score is {0}; it must be from 0 to 1")]
    RelevanceScore(f64),
    #[error("localizations: {0}")]
    Locale(#[from] LocaleError),
    #[error("localizations name {0:?} twice (tags are compared without regard to case)")]
    DuplicateLocale(String),
    #[error("a notification carries at most {MAX_LOCALIZATIONS} localizations; got {0}")]
    TooManyLocalizations(usize),
    #[error("the body of localization {0:?} is empty")]
    EmptyLocalizedBody(String),
    #[error("{0} holds {1:?}; it takes printable ASCII only")]
    NameCharacter(&'static str, char),
    #[error("{0} is empty; leave it out instead")]
    EmptyName(&'static str),
    #[error("{0} is {1} bytes; the limit is {max}", max = crate::presentation::MAX_NAME_BYTES)]
    NameTooLong(&'static str, usize),
    #[error("{field} {reason}")]
    Url { field: &'static str, reason: String },
    #[error("ttl_seconds is {0}; the most the providers accept is {MAX_TTL_SECONDS} (28 days)")]
    TtlTooLong(u32),
    #[error("collapse_key is {0} bytes; the limit is {MAX_COLLAPSE_KEY_BYTES}")]
    CollapseKeyTooLong(usize),
    #[error("collapse_key holds {0:?}; it takes printable ASCII only")]
    CollapseKeyCharacter(char),
    #[error("data key {0:?} is reserved by APNs, FCM or Clarion")]
    ReservedDataKey(String),
    #[error("data key is empty")]
    EmptyDataKey,
    #[error("the APNs payload would be {0} bytes; Apple accepts at most {APNS_MAX_PAYLOAD_BYTES}")]
    ApnsTooLarge(usize),
    #[error("the FCM payload would be {0} bytes; Google accepts at most {FCM_MAX_PAYLOAD_BYTES}")]
    FcmTooLarge(usize),
    #[error(
        "the web push message would be {0} bytes once encrypted; push services accept at most {WEB_MAX_PAYLOAD_BYTES}"
    )]
    WebTooLarge(usize),
    #[error("link is required by the declarative web push form (`web.declarative`)")]
    DeclarativeNeedsLink,
    #[error(
        "{0} holds a control character (NUL or another below U+0020 other than tab, newline and carriage return)"
    )]
    ControlCharacter(&'static str),
}

/// Refuses NUL and the other C0 control characters but tab, newline and
/// carriage return: no phone shows them, PostgreSQL cannot store NUL in
/// JSON, and they only ever arrive by mistake.
fn check_text(field: &'static str, value: &str) -> Result<(), PayloadError> {
    let control = value
        .chars()
        .any(|c| c.is_ascii_control() && !matches!(c, '\t' | '\n' | '\r'));
    if control {
        return Err(PayloadError::ControlCharacter(field));
    }
    Ok(())
}

impl Notification {
    /// An alert with `body` for `topics`, every other field at its default.
    pub fn alert(topics: Vec<String>, body: impl Into<String>) -> Self {
        Notification {
            app: crate::app::default_app(),
            topics,
            title: None,
            body: body.into(),
            link: None,
            image_url: None,
            priority: Priority::default(),
            ttl_seconds: DEFAULT_TTL_SECONDS,
            collapse_key: None,
            data: BTreeMap::new(),
            dry_run: false,
            push_type: PushType::Alert,
            badge: None,
            sound: None,
            category: None,
            interruption_level: None,
            relevance_score: None,
            android_channel_id: None,
            localizations: BTreeMap::new(),
            web: None,
            bulk: false,
            live_activity: None,
        }
    }

    /// Checks every rule and returns the notification with its topics
    /// de-duplicated (first occurrence kept), ready to be stored and sent.
    pub fn validated(mut self) -> Result<Self, PayloadError> {
        // Counted as sent, before duplicates are folded: the limit is on
        // the request, as the OpenAPI description states it.
        if self.topics.len() > MAX_TOPICS_PER_NOTIFICATION {
            return Err(PayloadError::TooManyTopics(self.topics.len()));
        }
        let mut seen = std::collections::HashSet::new();
        self.topics.retain(|topic| seen.insert(topic.clone()));
        if self.topics.is_empty() {
            return Err(PayloadError::NoTopics);
        }
        crate::app::validate_app(&self.app)?;
        for topic in &self.topics {
            validate_topic(topic)?;
        }
        if self.push_type.is_alert() && self.body.trim().is_empty() {
            return Err(PayloadError::EmptyBody);
        }
        self.check_presentation()?;
        self.localizations = normalized_localizations(std::mem::take(&mut self.localizations))?;
        check_text("body", &self.body)?;
        if let Some(title) = &self.title {
            check_text("title", title)?;
        }
        for (field, value) in [
            ("link", &self.link),
            ("image_url", &self.image_url),
            ("collapse_key", &self.collapse_key),
        ] {
            if let Some(value) = value {
                check_text(field, value)?;
            }
        }
        for (key, value) in &self.data {
            check_text("a data key", key)?;
            check_text("a data value", value)?;
        }
        check_url("link", self.link.as_deref(), MAX_URL_BYTES)?;
        check_url("image_url", self.image_url.as_deref(), MAX_IMAGE_URL_BYTES)?;
        if self.ttl_seconds > MAX_TTL_SECONDS {
            return Err(PayloadError::TtlTooLong(self.ttl_seconds));
        }
        if let Some(key) = &self.collapse_key {
            if let Some(bad) = key.chars().find(|c| !matches!(c, ' '..='~')) {
                return Err(PayloadError::CollapseKeyCharacter(bad));
            }
            if key.len() > MAX_COLLAPSE_KEY_BYTES {
                return Err(PayloadError::CollapseKeyTooLong(key.len()));
            }
        }
        for key in self.data.keys() {
            check_data_key(key)?;
        }
        self.check_sizes()?;
        for key in self.localizations.keys() {
            self.localized(Some(key)).check_sizes()?;
        }
        Ok(self)
    }

    fn check_sizes(&self) -> Result<(), PayloadError> {
        let apns = self.apns_payload_bytes();
        if apns > APNS_MAX_PAYLOAD_BYTES {
            return Err(PayloadError::ApnsTooLarge(apns));
        }
        let fcm = self.fcm_payload_bytes();
        if fcm > FCM_MAX_PAYLOAD_BYTES {
            return Err(PayloadError::FcmTooLarge(fcm));
        }
        self.check_web()
    }

    /// The notification as a device whose best match is `locale` (a key of
    /// `localizations`, or `None` for the default text) gets it: that
    /// text, and no localizations left to carry.
    pub fn localized(&self, locale: Option<&str>) -> Notification {
        let mut one = Notification {
            localizations: BTreeMap::new(),
            ..self.clone()
        };
        if let Some(text) = locale.and_then(|key| self.localizations.get(key)) {
            one.title = text.title.clone();
            one.body = text.body.clone();
        }
        one
    }

    /// Size of the APNs JSON body the dispatcher sends for this notification.
    /// An alert: `aps.alert` with title and body, `badge`, `sound`,
    /// `category`, `mutable-content` (1 when an image is attached),
    /// `thread-id` from the collapse key, `interruption-level`,
    /// `relevance-score`. A background push: `aps.content-available` only.
    /// Then the custom keys, the notification's id among them.
    pub fn apns_payload_bytes(&self) -> usize {
        let mut aps = Map::new();
        if self.push_type.is_alert() {
            // The shape `a2` gives it: a bare string alert without a title,
            // and `mutable-content` always present.
            let alert = match &self.title {
                Some(title) => json!({"title": title, "body": self.body}),
                None => json!(self.body),
            };
            aps.insert("alert".into(), alert);
            if let Some(badge) = self.badge {
                aps.insert("badge".into(), json!(badge));
            }
            if let Some(sound) = self.sound_name() {
                aps.insert("sound".into(), json!(sound));
            }
            if let Some(category) = &self.category {
                aps.insert("category".into(), json!(category));
            }
            aps.insert(
                "mutable-content".into(),
                json!(u8::from(self.image_url.is_some())),
            );
            if let Some(key) = &self.collapse_key {
                aps.insert("thread-id".into(), json!(key));
            }
            if let Some(level) = self.interruption_level {
                aps.insert("interruption-level".into(), json!(level.apns_name()));
            }
            if let Some(score) = self.relevance_score {
                aps.insert("relevance-score".into(), json!(score));
            }
        } else {
            aps.insert("content-available".into(), json!(1));
        }
        let mut root = self.custom_keys(SIZED_ID);
        root.insert("aps".into(), Value::Object(aps));
        json_len(&Value::Object(root))
    }

    /// Size of what FCM counts against its limit: the `notification`, the
    /// `android.notification` and the `data` objects the dispatcher sends.
    pub fn fcm_payload_bytes(&self) -> usize {
        let mut root = Map::new();
        if self.push_type.is_alert() {
            root.insert("notification".into(), Value::Object(self.fcm_notification()));
            root.insert(
                "android_notification".into(),
                Value::Object(self.fcm_android_notification()),
            );
        }
        root.insert("data".into(), Value::Object(self.custom_keys(SIZED_ID)));
        json_len(&Value::Object(root))
    }

    /// FCM's `notification` object: title, body and image.
    pub fn fcm_notification(&self) -> Map<String, Value> {
        let mut notification = Map::new();
        if let Some(title) = &self.title {
            notification.insert("title".into(), json!(title));
        }
        notification.insert("body".into(), json!(self.body));
        if let Some(image) = &self.image_url {
            notification.insert("image".into(), json!(image));
        }
        notification
    }

    /// FCM's `android.notification` object: the named sound (the channel's
    /// own otherwise), `click_action` from the category, the channel, the
    /// badge count and the priority from the interruption level.
    pub fn fcm_android_notification(&self) -> Map<String, Value> {
        let mut android = Map::new();
        if let Some(Some(sound)) = &self.sound {
            android.insert("sound".into(), json!(sound));
        }
        if let Some(category) = &self.category {
            android.insert("click_action".into(), json!(category));
        }
        if let Some(channel) = &self.android_channel_id {
            android.insert("channel_id".into(), json!(channel));
        }
        if let Some(badge) = self.badge {
            android.insert("notification_count".into(), json!(badge));
        }
        if let Some(level) = self.interruption_level {
            android.insert("notification_priority".into(), json!(level.android_priority()));
        }
        android
    }

    /// The custom key/value pairs delivered beside the alert on both
    /// platforms: `data` plus `link` and `image_url` when present, and
    /// [`NOTIFICATION_ID_KEY`] with `notification_id`. Clarion's keys are
    /// written last, so they win over a `data` key of the same name (which
    /// validation refuses; a notification stored before a key was reserved
    /// may still hold one).
    pub fn custom_keys(&self, notification_id: Uuid) -> Map<String, Value> {
        let mut keys: Map<String, Value> = self
            .data
            .iter()
            .map(|(key, value)| (key.clone(), json!(value)))
            .collect();
        if let Some(link) = &self.link {
            keys.insert("link".into(), json!(link));
        }
        if let Some(image) = &self.image_url {
            keys.insert("image_url".into(), json!(image));
        }
        keys.insert(
            NOTIFICATION_ID_KEY.into(),
            json!(notification_id.hyphenated().to_string()),
        );
        keys
    }
}

/// The localizations with their tags checked and lower-cased, and their
/// texts checked as the default text is.
fn normalized_localizations(
    localizations: BTreeMap<String, LocalizedText>,
) -> Result<BTreeMap<String, LocalizedText>, PayloadError> {
    if localizations.len() > MAX_LOCALIZATIONS {
        return Err(PayloadError::TooManyLocalizations(localizations.len()));
    }
    let mut normalized = BTreeMap::new();
    for (tag, text) in localizations {
        let key = normalize_locale(&tag)?;
        if text.body.trim().is_empty() {
            return Err(PayloadError::EmptyLocalizedBody(tag));
        }
        check_text("a localized body", &text.body)?;
        if let Some(title) = &text.title {
            check_text("a localized title", title)?;
        }
        if normalized.insert(key, text).is_some() {
            return Err(PayloadError::DuplicateLocale(tag));
        }
    }
    Ok(normalized)
}

/// The id the size estimates write: validation runs before the id is
/// known, and every id is written as 36 characters (hyphenated), so the
/// size is the same for any notification.
const SIZED_ID: Uuid = Uuid::nil();

fn json_len(value: &Value) -> usize {
    serde_json::to_vec(value)
        .map(|bytes| bytes.len())
        .unwrap_or(usize::MAX)
}

fn check_url(field: &'static str, value: Option<&str>, max_bytes: usize) -> Result<(), PayloadError> {
    let Some(value) = value else { return Ok(()) };
    let fail = |reason: String| Err(PayloadError::Url { field, reason });
    if value.len() > max_bytes {
        return fail(format!("is {} bytes; the limit is {max_bytes}", value.len()));
    }
    match url::Url::parse(value) {
        Ok(url) if !matches!(url.scheme(), "http" | "https") => {
            return fail(format!("must be an http(s) URL, not {}:", url.scheme()));
        }
        Ok(_) => {}
        Err(err) => return fail(format!("is not an absolute URL: {err}")),
    }
    match URL_REGEX.as_ref() {
        Some(pattern) if pattern.is_match(value) => Ok(()),
        Some(_) => fail(
            "must be an ASCII http(s) URL with a host name (letters, digits, '-', dots), \
             an optional port and RFC 3986 characters after it"
                .into(),
        ),
        None => fail("cannot be checked (the URL pattern did not compile)".into()),
    }
}

fn check_data_key(key: &str) -> Result<(), PayloadError> {
    if key.is_empty() {
        return Err(PayloadError::EmptyDataKey);
    }
    let lower = key.to_ascii_lowercase();
    let reserved = RESERVED_DATA_KEYS.contains(&lower.as_str())
        || RESERVED_DATA_PREFIXES
            .iter()
            .any(|prefix| lower.starts_with(prefix));
    if reserved {
        return Err(PayloadError::ReservedDataKey(key.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn sample() -> Notification {
        Notification {
            topics: vec!["breaking/uk".into(), "breaking/us".into()],
            title: Some("Breaking".into()),
            body: "Something happened".into(),
            link: Some("https://news.example/story/1".into()),
            image_url: Some("https://news.example/story/1.jpg".into()),
            priority: Priority::High,
            ttl_seconds: 3600,
            collapse_key: Some("breaking".into()),
            data: BTreeMap::from([("section".into(), "world".into())]),
            ..Notification::alert(Vec::new(), "")
        }
    }

    #[test]
    fn localizations_are_checked_lower_cased_and_each_fits_the_limits() {
        let text = |body: &str| LocalizedText {
            title: Some("Titre".into()),
            body: body.into(),
        };
        let mut n = sample();
        n.localizations.insert("fr-CA".into(), text("Au Canada"));
        n.localizations.insert("fr".into(), text("En France"));
        let valid = n.clone().validated().unwrap();
        assert_eq!(valid.localizations.keys().collect::<Vec<_>>(), ["fr", "fr-ca"]);
        let canadian = valid.localized(Some("fr-ca"));
        assert_eq!(canadian.body, "Au Canada");
        assert!(canadian.localizations.is_empty());
        assert_eq!(valid.localized(None).body, sample().body);

        let mut twice = n.clone();
        twice.localizations.insert("FR".into(), text("x"));
        assert!(matches!(twice.validated(), Err(PayloadError::DuplicateLocale(_))));
        let mut bad_tag = n.clone();
        bad_tag.localizations.insert("fr_CA".into(), text("x"));
        assert!(matches!(bad_tag.validated(), Err(PayloadError::Locale(_))));
        let mut empty = n.clone();
        empty.localizations.insert("de".into(), text(" "));
        assert_eq!(
            empty.validated(),
            Err(PayloadError::EmptyLocalizedBody("de".into()))
        );
        let mut long = n.clone();
        long.localizations.insert("de".into(), text(&"x".repeat(4000)));
        assert!(matches!(
            long.validated(),
            Err(PayloadError::ApnsTooLarge(_) | PayloadError::FcmTooLarge(_))
        ));
        let mut background = n;
        background.push_type = PushType::Background;
        background.title = None;
        background.body = String::new();
        background.image_url = None;
        assert_eq!(
            background.validated(),
            Err(PayloadError::NotForBackground("localizations"))
        );
    }

    #[test]
    fn a_typical_alert_is_valid() {
        assert_eq!(sample().validated(), Ok(sample()));
    }

    #[test]
    fn defaults_fill_optional_fields() {
        let parsed: Notification = serde_json::from_str(r#"{"topics":["breaking"],"body":"hi"}"#).unwrap();
        assert_eq!(parsed.priority, Priority::High);
        assert_eq!(parsed.ttl_seconds, DEFAULT_TTL_SECONDS);
        assert!(!parsed.dry_run);
        assert!(parsed.validated().is_ok());
    }

    #[test]
    fn duplicate_topics_are_folded() {
        let mut n = sample();
        n.topics = vec!["a".into(), "b".into(), "a".into()];
        assert_eq!(
            n.validated().unwrap().topics,
            vec!["a".to_string(), "b".to_string()]
        );
    }

    #[test]
    fn each_rule_has_its_error() {
        type Case = (fn(&mut Notification), PayloadError);
        let cases: Vec<Case> = vec![
            (|n| n.topics.clear(), PayloadError::NoTopics),
            (
                |n| n.topics = (0..21).map(|i| format!("t{i}")).collect(),
                PayloadError::TooManyTopics(21),
            ),
            (|n| n.body = "  ".into(), PayloadError::EmptyBody),
            (
                |n| n.body = "breaking\0news".into(),
                PayloadError::ControlCharacter("body"),
            ),
            (
                |n| n.title = Some("\u{1b}[31mred".into()),
                PayloadError::ControlCharacter("title"),
            ),
            (
                |n| {
                    n.data.insert("section".into(), "a\u{7}b".into());
                },
                PayloadError::ControlCharacter("a data value"),
            ),
            (
                |n| n.ttl_seconds = MAX_TTL_SECONDS + 1,
                PayloadError::TtlTooLong(MAX_TTL_SECONDS + 1),
            ),
            (
                |n| n.collapse_key = Some("k".repeat(65)),
                PayloadError::CollapseKeyTooLong(65),
            ),
            (
                |n| {
                    n.data.insert("google.x".into(), "1".into());
                },
                PayloadError::ReservedDataKey("google.x".into()),
            ),
            (
                |n| {
                    n.data.insert("aps".into(), "1".into());
                },
                PayloadError::ReservedDataKey("aps".into()),
            ),
        ];
        for (mutate, expected) in cases {
            let mut n = sample();
            mutate(&mut n);
            assert_eq!(n.validated(), Err(expected));
        }
    }

    #[test]
    fn bad_topics_and_urls_are_refused() {
        let mut n = sample();
        n.topics = vec!["breaking//uk".into()];
        assert!(matches!(n.validated(), Err(PayloadError::Topic(_))));
        let mut n = sample();
        n.link = Some("javascript:alert(1)".into());
        assert!(matches!(
            n.validated(),
            Err(PayloadError::Url { field: "link", .. })
        ));
        let mut n = sample();
        n.image_url = Some("not a url".into());
        assert!(matches!(
            n.validated(),
            Err(PayloadError::Url {
                field: "image_url",
                ..
            })
        ));
    }

    #[test]
    fn topics_are_counted_as_sent_and_collapse_keys_are_ascii() {
        let mut n = sample();
        n.topics = vec!["a".into(); 21];
        assert_eq!(n.validated(), Err(PayloadError::TooManyTopics(21)));
        let mut n = sample();
        n.collapse_key = Some("é".into());
        assert_eq!(n.validated(), Err(PayloadError::CollapseKeyCharacter('é')));
    }

    fn regex(pattern: &str) -> regex::Regex {
        regex::Regex::new(pattern).unwrap()
    }

    fn url_ok(url: &str) -> bool {
        check_url("link", Some(url), MAX_URL_BYTES).is_ok()
    }

    #[test]
    fn the_patterns_state_the_rules() {
        let text = regex(TEXT_PATTERN);
        let body = regex(BODY_PATTERN);
        for value in [
            "",
            " ",
            "a",
            "a\tb\n",
            "\u{85}",
            "\u{3000}x",
            "x\0",
            "\u{7f}",
            "\u{1b}[",
            "é ü",
            "\r\n",
        ] {
            assert_eq!(text.is_match(value), check_text("t", value).is_ok(), "{value:?}");
            let body_ok = check_text("body", value).is_ok() && !value.trim().is_empty();
            assert_eq!(body.is_match(value), body_ok, "{value:?}");
        }
        let urls = regex(URL_PATTERN);
        for (value, ok) in [
            ("https://news.example/story/1?x=1&y=%20#top", true),
            ("http://localhost:8080/", true),
            ("https://a-b.c2.example:65535", true),
            ("https://news.example:65536/", false),
            ("https://1.2.3.4/", false),
            ("https://xn--bcher-kva.example/", false),
            ("https://news.example/é", false),
            ("https://news.example/a b", false),
            ("https://user@news.example/", false),
            ("HTTPS://news.example/", false),
            ("ftp://news.example/", false),
            ("https://", false),
            ("https://news.example/\n", false),
        ] {
            assert_eq!(urls.is_match(value), ok, "{value:?}");
            assert_eq!(url_ok(value), ok, "{value:?}");
        }
        let reserved = regex(RESERVED_DATA_KEY_PATTERN);
        for key in [
            "aps",
            "APS",
            "Link",
            "image_url",
            "from",
            "notification",
            "message_type",
            "notification_id",
            "Notification_ID",
            "notification_idx",
            "google.x",
            "GCM.y",
            "section",
            "apsx",
            "google",
            "gcm",
        ] {
            assert_eq!(reserved.is_match(key), check_data_key(key).is_err(), "{key:?}");
        }
        let collapse = regex(COLLAPSE_KEY_PATTERN);
        for key in ["breaking", "a b~", "é", "a\tb", ""] {
            assert_eq!(
                collapse.is_match(key),
                key.chars().all(|c| matches!(c, ' '..='~')),
                "{key:?}"
            );
        }
    }

    #[test]
    fn fcm_limit_is_reached_before_apns_limit() {
        let mut n = sample();
        n.body = "x".repeat(3815);
        let apns = n.apns_payload_bytes();
        let fcm = n.fcm_payload_bytes();
        assert!(apns <= APNS_MAX_PAYLOAD_BYTES, "apns {apns}");
        assert_eq!(n.validated(), Err(PayloadError::FcmTooLarge(fcm)));
    }

    #[test]
    fn each_url_at_its_limit_fits_both_providers() {
        let long = |fill: &str, len: usize| format!("https://news.example/{}", fill.repeat(len - 21));
        let mut n = sample();
        n.data.clear();
        n.image_url = None;
        n.link = Some(long("a", MAX_URL_BYTES));
        assert!(
            n.clone().validated().is_ok(),
            "link: fcm {}",
            n.fcm_payload_bytes()
        );
        n.link = None;
        n.image_url = Some(long("b", MAX_IMAGE_URL_BYTES));
        assert!(
            n.clone().validated().is_ok(),
            "image: fcm {}",
            n.fcm_payload_bytes()
        );
        n.image_url = Some(long("b", MAX_IMAGE_URL_BYTES + 1));
        assert!(matches!(
            n.validated(),
            Err(PayloadError::Url {
                field: "image_url",
                ..
            })
        ));
    }

    #[test]
    fn the_notification_id_key_is_reserved_and_ours_wins() {
        for key in ["notification_id", "NOTIFICATION_ID", "Notification_Id"] {
            let mut n = sample();
            n.data.insert(key.into(), "spoofed".into());
            assert_eq!(n.validated(), Err(PayloadError::ReservedDataKey(key.into())));
        }
        // Stored before the key was reserved: the real id still wins.
        let mut n = sample();
        n.data.insert(NOTIFICATION_ID_KEY.into(), "spoofed".into());
        let id = Uuid::from_u128(0x6f1c_0000_0000_0000_0000_0000_0000_0042);
        let keys = n.custom_keys(id);
        assert_eq!(
            keys[NOTIFICATION_ID_KEY],
            json!("6f1c0000-0000-0000-0000-000000000042")
        );
        assert_eq!(keys["section"], json!("world"));
    }

    #[test]
    fn the_notification_id_is_counted_in_both_sizes() {
        let mut n = sample();
        n.data.clear();
        n.link = None;
        n.image_url = None;
        let keys = n.custom_keys(Uuid::new_v4());
        assert_eq!(keys.len(), 1, "{keys:?}");
        // `"notification_id":"<36 characters>"` and its comma.
        let id_bytes = json_len(&json!({NOTIFICATION_ID_KEY: Uuid::nil().to_string()})) - 2 + 1;
        assert_eq!(id_bytes, 57);
        let mut without = Map::new();
        without.insert(
            "aps".into(),
            json!({"alert": {"title": "Breaking", "body": "Something happened"}, "sound": "default",
                   "mutable-content": 0, "thread-id": "breaking"}),
        );
        assert_eq!(
            n.apns_payload_bytes(),
            json_len(&Value::Object(without)) + id_bytes
        );
        // Any id is the size of the one the estimate writes.
        for id in [Uuid::nil(), Uuid::max(), Uuid::new_v4()] {
            let mut root = n.custom_keys(id);
            root.insert("aps".into(), json!({}));
            assert_eq!(
                json_len(&Value::Object(root)),
                json_len(&Value::Object({
                    let mut root = n.custom_keys(SIZED_ID);
                    root.insert("aps".into(), json!({}));
                    root
                }))
            );
        }
        // A data-only background push is the id alone in FCM's `data`.
        let background = Notification {
            push_type: PushType::Background,
            title: None,
            body: String::new(),
            ..n
        };
        assert_eq!(
            background.fcm_payload_bytes(),
            json_len(&json!({"data": {NOTIFICATION_ID_KEY: Uuid::nil().to_string()}}))
        );
        // A body that would just fit without the id is refused.
        let mut full = sample();
        full.data.clear();
        full.body = String::new();
        let room = APNS_MAX_PAYLOAD_BYTES + id_bytes - full.apns_payload_bytes();
        full.body = "x".repeat(room);
        assert_eq!(
            full.validated(),
            Err(PayloadError::ApnsTooLarge(APNS_MAX_PAYLOAD_BYTES + id_bytes))
        );
    }

    #[test]
    fn oversized_bodies_are_refused() {
        let mut n = sample();
        n.body = "x".repeat(5000);
        assert!(matches!(n.validated(), Err(PayloadError::ApnsTooLarge(_))));
    }

    proptest! {
        #[test]
        fn the_url_pattern_agrees_with_validation(url in "https?://[a-z0-9.:-]{0,12}(/[a-zA-Z0-9%é /?#-]{0,10})?") {
            prop_assert_eq!(regex(URL_PATTERN).is_match(&url), url_ok(&url));
        }

        #[test]
        fn the_text_patterns_agree_with_validation(value in "[a \\t\\n\\x00-\\x1f\\x7f\\u{85}\\u{a0}\\u{3000}é]{0,6}") {
            prop_assert_eq!(regex(TEXT_PATTERN).is_match(&value), check_text("t", &value).is_ok());
            let body_ok = check_text("body", &value).is_ok() && !value.trim().is_empty();
            prop_assert_eq!(regex(BODY_PATTERN).is_match(&value), body_ok);
        }

        #[test]
        fn validation_agrees_with_the_size_estimates(body_len in 1usize..5000, data_len in 0usize..200) {
            let mut n = sample();
            n.body = "é".repeat(body_len / 2 + 1);
            n.data.insert("blob".into(), "d".repeat(data_len));
            let apns = n.apns_payload_bytes();
            let fcm = n.fcm_payload_bytes();
            let ok = n.validated().is_ok();
            prop_assert_eq!(ok, apns <= APNS_MAX_PAYLOAD_BYTES && fcm <= FCM_MAX_PAYLOAD_BYTES);
        }

        #[test]
        fn notifications_round_trip_through_json(
            title in proptest::option::of(".{0,40}"),
            body in ".{1,200}",
            ttl in 0u32..=MAX_TTL_SECONDS,
            dry_run in any::<bool>(),
            data in proptest::collection::btree_map("[a-z]{1,8}", ".{0,20}", 0..5),
        ) {
            let n = Notification { title, body, ttl_seconds: ttl, dry_run, data, ..sample() };
            let json = serde_json::to_string(&n).unwrap();
            prop_assert_eq!(serde_json::from_str::<Notification>(&json).unwrap(), n);
        }
    }
}
