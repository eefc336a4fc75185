//! Platforms, APNs environments, and what a plausible device token looks like
//! on each platform.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The delivery platform of a device: Apple (APNs), Google (FCM) or a web
/// browser (Web Push, RFC 8030, through the browser's push service).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Ios,
    Android,
    Web,
}

impl Platform {
    /// How many platforms there are.
    pub const COUNT: usize = 3;

    /// Every platform, in a fixed order (each one's [`Platform::index`]).
    pub const ALL: [Platform; Platform::COUNT] = [Platform::Ios, Platform::Android, Platform::Web];

    /// Position in [`Platform::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The lowercase name used in the API, in the database and as routing key.
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Ios => "ios",
            Platform::Android => "android",
            Platform::Web => "web",
        }
    }

    /// How the platform's name reads to people (the console's rows and
    /// previews).
    pub fn label(self) -> &'static str {
        match self {
            Platform::Ios => "iOS",
            Platform::Android => "Android",
            Platform::Web => "Web",
        }
    }

    /// The delivery channel that serves this platform: the dispatcher's
    /// folder, an app's table in the apps file (`[apps.<id>.<channel>]`)
    /// and the prefix of its flat keys.
    pub fn channel(self) -> &'static str {
        match self {
            Platform::Ios => "apns",
            Platform::Android => "fcm",
            Platform::Web => "webpush",
        }
    }

    /// The APNs environments a device of this platform is registered in:
    /// only Apple keeps development builds apart; every other platform's
    /// devices are `production`.
    pub fn environments(self) -> &'static [ApnsEnvironment] {
        match self {
            Platform::Ios => &[ApnsEnvironment::Production, ApnsEnvironment::Sandbox],
            Platform::Android | Platform::Web => &[ApnsEnvironment::Production],
        }
    }

    /// True when a registration of this platform names its environment.
    pub fn has_environments(self) -> bool {
        self.environments().len() > 1
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Platform {
    type Err = TokenError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ios" => Ok(Platform::Ios),
            "android" => Ok(Platform::Android),
            "web" => Ok(Platform::Web),
            other => Err(TokenError::UnknownPlatform(other.to_owned())),
        }
    }
}

/// Which APNs environment an iOS token belongs to. Tokens from development
/// builds only work against the sandbox; keeping them apart means a sandbox
/// token can never be sent to (and rejected by) production.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApnsEnvironment {
    #[default]
    Production,
    Sandbox,
}

impl ApnsEnvironment {
    pub fn as_str(self) -> &'static str {
        match self {
            ApnsEnvironment::Production => "production",
            ApnsEnvironment::Sandbox => "sandbox",
        }
    }
}

/// The segment a push belongs to for the safety valve: where one
/// misconfiguration (a wrong bundle id, project or APNs environment) would
/// hit every push alike — the platform, and the APNs environment on a
/// platform that has several ([`segments`] lists them all).
pub fn segment(platform: Platform, environment: ApnsEnvironment) -> &'static str {
    match (platform, environment) {
        (Platform::Ios, ApnsEnvironment::Production) => "ios/production",
        (Platform::Ios, ApnsEnvironment::Sandbox) => "ios/sandbox",
        (Platform::Android, _) => "android",
        (Platform::Web, _) => "web",
    }
}

/// Every segment of the safety valve, in a fixed order: each platform's
/// environments in [`Platform::ALL`] order.
pub fn segments() -> impl Iterator<Item = &'static str> {
    Platform::ALL.into_iter().flat_map(|platform| {
        platform
            .environments()
            .iter()
            .map(move |environment| segment(platform, *environment))
    })
}

/// The segment named `name`, as a `'static` name (a metric label from a
/// fixed set); `None` for a name that is no segment.
pub fn segment_named(name: &str) -> Option<&'static str> {
    segments().find(|segment| *segment == name)
}

impl fmt::Display for ApnsEnvironment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ApnsEnvironment {
    type Err = TokenError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "production" => Ok(ApnsEnvironment::Production),
            "sandbox" => Ok(ApnsEnvironment::Sandbox),
            other => Err(TokenError::UnknownEnvironment(other.to_owned())),
        }
    }
}

/// Length of an APNs device token in hex characters (32 bytes).
pub const APNS_TOKEN_HEX_LEN: usize = 64;
/// Shortest FCM registration token accepted; real ones are ~150 characters.
pub const FCM_TOKEN_MIN_LEN: usize = 100;
/// Longest FCM registration token accepted.
pub const FCM_TOKEN_MAX_LEN: usize = 4096;

/// Shortest id a site may give a web push subscription.
pub const WEB_TOKEN_MIN_LEN: usize = 16;
/// Longest id a site may give a web push subscription.
pub const WEB_TOKEN_MAX_LEN: usize = 128;

/// A plausible APNs token as a regular expression (ECMA 262, Python and
/// Rust read it alike), for the OpenAPI description.
pub const APNS_TOKEN_PATTERN: &str = "^[0-9A-Fa-f]{64}$";
/// A plausible FCM token as a regular expression.
pub const FCM_TOKEN_PATTERN: &str = "^[A-Za-z0-9_:.-]{100,4096}$";
/// A web push subscription's id (chosen by the site) as a regular expression.
pub const WEB_TOKEN_PATTERN: &str = "^[A-Za-z0-9_-]{16,128}$";
/// What a device token looks like on each platform, for the OpenAPI
/// description of a `token` path parameter.
pub fn token_description() -> String {
    format!(
        "Device token: iOS (APNs) {APNS_TOKEN_HEX_LEN} hexadecimal characters (stored lowercase); \
         Android (FCM) {FCM_TOKEN_MIN_LEN} to {FCM_TOKEN_MAX_LEN} letters, digits, `-`, `_`, `:` and `.`; \
         web (a subscription's id, chosen by the site) {WEB_TOKEN_MIN_LEN} to {WEB_TOKEN_MAX_LEN} letters, \
         digits, `-` and `_`"
    )
}
/// A token plausible for one platform or another ([`is_plausible_token`]).
pub const TOKEN_PATTERN: &str = "^(?:[0-9A-Fa-f]{64}|[A-Za-z0-9_:.-]{100,4096}|[A-Za-z0-9_-]{16,128})$";

/// Why a token or platform was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("unknown platform {0:?}: expected {names}", names = platform_names())]
    UnknownPlatform(String),
    #[error("unknown APNs environment {0:?}: expected \"production\" or \"sandbox\"")]
    UnknownEnvironment(String),
    #[error("`environment` applies to iOS tokens only")]
    NoEnvironments,
    #[error("not a device token: expected 64 hex characters (iOS) or an FCM registration token (Android)")]
    NotAToken,
    #[error("an iOS device token is {APNS_TOKEN_HEX_LEN} hexadecimal characters; got {0} characters")]
    ApnsLength(usize),
    #[error("an iOS device token is hexadecimal; found {0:?}")]
    ApnsNotHex(char),
    #[error(
        "an Android (FCM) token is {FCM_TOKEN_MIN_LEN} to {FCM_TOKEN_MAX_LEN} characters; got {0} characters"
    )]
    FcmLength(usize),
    #[error("an Android (FCM) token holds only letters, digits and '-', '_', ':', '.'; found {0:?}")]
    FcmCharacter(char),
    #[error(
        "a web subscription's id is {WEB_TOKEN_MIN_LEN} to {WEB_TOKEN_MAX_LEN} characters; got {0} characters"
    )]
    WebLength(usize),
    #[error("a web subscription's id holds only letters, digits, '-' and '_'; found {0:?}")]
    WebCharacter(char),
}

/// Checks that `token` is plausible for `platform` and returns its canonical
/// form (APNs tokens are case-insensitive hex and are stored lowercase).
pub fn normalize_token(platform: Platform, token: &str) -> Result<String, TokenError> {
    match platform {
        Platform::Ios => {
            if token.len() != APNS_TOKEN_HEX_LEN {
                return Err(TokenError::ApnsLength(token.chars().count()));
            }
            if let Some(bad) = token.chars().find(|c| !c.is_ascii_hexdigit()) {
                return Err(TokenError::ApnsNotHex(bad));
            }
            Ok(token.to_ascii_lowercase())
        }
        Platform::Android => {
            // Valid tokens are ASCII, where the length in bytes is the
            // length in characters: no counting pass for them.
            let len = if token.is_ascii() {
                token.len()
            } else {
                token.chars().count()
            };
            if !(FCM_TOKEN_MIN_LEN..=FCM_TOKEN_MAX_LEN).contains(&len) {
                return Err(TokenError::FcmLength(len));
            }
            if let Some(bad) = token.chars().find(|c| !is_fcm_token_char(*c)) {
                return Err(TokenError::FcmCharacter(bad));
            }
            Ok(token.to_owned())
        }
        Platform::Web => {
            let len = token.chars().count();
            if !(WEB_TOKEN_MIN_LEN..=WEB_TOKEN_MAX_LEN).contains(&len) {
                return Err(TokenError::WebLength(len));
            }
            if let Some(bad) = token.chars().find(|c| !is_web_token_char(*c)) {
                return Err(TokenError::WebCharacter(bad));
            }
            Ok(token.to_owned())
        }
    }
}

/// True when `token` is plausible for at least one platform; used where the
/// platform is not known yet (looking a token up).
pub fn is_plausible_token(token: &str) -> bool {
    Platform::ALL
        .iter()
        .any(|platform| normalize_token(*platform, token).is_ok())
}

/// Canonical form of a token whose platform is not known: lowercase when it
/// looks like an APNs token, unchanged otherwise.
pub fn canonical_token(token: &str) -> String {
    normalize_token(Platform::Ios, token).unwrap_or_else(|_| token.to_owned())
}

/// Enough of a token to tell devices apart in logs; never log a whole token.
pub fn token_prefix(token: &str) -> &str {
    let end = token.char_indices().nth(8).map_or(token.len(), |(i, _)| i);
    &token[..end]
}

/// The platforms' names, for messages: `"a", "b" or "c"`.
fn platform_names() -> String {
    let names: Vec<String> = Platform::ALL
        .iter()
        .map(|platform| format!("{:?}", platform.as_str()))
        .collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

fn is_web_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_')
}

fn is_fcm_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    const APNS: &str = "0123456789abcdef0123456789ABCDEF0123456789abcdef0123456789abcdef";

    #[test]
    fn apns_tokens_are_lowercased_hex() {
        let token = normalize_token(Platform::Ios, APNS).expect("valid token");
        assert_eq!(token, APNS.to_ascii_lowercase());
    }

    #[test]
    fn apns_tokens_of_wrong_length_or_alphabet_are_refused() {
        assert_eq!(
            normalize_token(Platform::Ios, "abc"),
            Err(TokenError::ApnsLength(3))
        );
        let not_hex = APNS.replacen('0', "g", 1);
        assert_eq!(
            normalize_token(Platform::Ios, &not_hex),
            Err(TokenError::ApnsNotHex('g'))
        );
    }

    #[test]
    fn fcm_tokens_need_length_and_url_safe_characters() {
        let good = format!("dGVzdA:APA91b{}", "x_-".repeat(40));
        assert_eq!(
            normalize_token(Platform::Android, &good).as_deref(),
            Ok(good.as_str())
        );
        assert_eq!(
            normalize_token(Platform::Android, "short"),
            Err(TokenError::FcmLength(5))
        );
        let spaced = format!("{} x", "a".repeat(120));
        assert_eq!(
            normalize_token(Platform::Android, &spaced),
            Err(TokenError::FcmCharacter(' '))
        );
        // Lengths are counted in characters, not bytes, and the first
        // character outside the alphabet is named.
        assert_eq!(
            normalize_token(Platform::Android, &"é".repeat(10)),
            Err(TokenError::FcmLength(10))
        );
        let accented = format!("{}é{}", "a".repeat(60), "b".repeat(60));
        assert_eq!(
            normalize_token(Platform::Android, &accented),
            Err(TokenError::FcmCharacter('é'))
        );
    }

    #[test]
    fn the_patterns_state_the_rules() {
        let apns = regex::Regex::new(APNS_TOKEN_PATTERN).unwrap();
        let fcm = regex::Regex::new(FCM_TOKEN_PATTERN).unwrap();
        let web = regex::Regex::new(WEB_TOKEN_PATTERN).unwrap();
        let any = regex::Regex::new(TOKEN_PATTERN).unwrap();
        let fcm_token = format!("dGVzdA:APA91b{}", "x_-.".repeat(30));
        for token in [
            APNS.to_owned(),
            fcm_token.clone(),
            "abc".into(),
            "g".repeat(64),
            "a".repeat(99),
            "a".repeat(100),
            "a".repeat(4096),
            "a".repeat(4097),
            format!("{fcm_token} "),
            format!("{fcm_token}\n"),
            "é".repeat(120),
            "a".repeat(15),
            "a".repeat(16),
            "a-_Z".repeat(32),
            "a".repeat(129),
            format!("{}.", "a".repeat(20)),
        ] {
            let ios = normalize_token(Platform::Ios, &token).is_ok();
            let android = normalize_token(Platform::Android, &token).is_ok();
            assert_eq!(apns.is_match(&token), ios, "{token:?}");
            assert_eq!(fcm.is_match(&token), android, "{token:?}");
            let browser = normalize_token(Platform::Web, &token).is_ok();
            assert_eq!(web.is_match(&token), browser, "{token:?}");
            assert_eq!(any.is_match(&token), is_plausible_token(&token), "{token:?}");
        }
    }

    #[test]
    fn log_prefixes_are_short() {
        assert_eq!(token_prefix(APNS), "01234567");
        assert_eq!(token_prefix("abc"), "abc");
        assert_eq!(token_prefix("ééééééééé"), "éééééééé");
    }

    #[test]
    fn platforms_parse_and_print_the_same_names() {
        for platform in Platform::ALL {
            assert_eq!(platform.as_str().parse::<Platform>(), Ok(platform));
        }
        assert_eq!(
            "windows".parse::<Platform>(),
            Err(TokenError::UnknownPlatform("windows".into()))
        );
        assert_eq!(
            TokenError::UnknownPlatform("windows".into()).to_string(),
            r#"unknown platform "windows": expected "ios", "android" or "web""#
        );
        for (index, platform) in Platform::ALL.into_iter().enumerate() {
            assert_eq!(platform.index(), index);
        }
    }

    #[test]
    fn segments_are_each_platform_and_environment_once() {
        let all: Vec<&str> = segments().collect();
        assert_eq!(all, ["ios/production", "ios/sandbox", "android", "web"]);
        for platform in Platform::ALL {
            for environment in platform.environments() {
                assert_eq!(
                    segment_named(segment(platform, *environment)),
                    Some(segment(platform, *environment))
                );
            }
        }
        assert_eq!(segment_named("ios"), None);
    }
}
