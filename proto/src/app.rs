//! Apps: one installation serves several apps (editions, a puzzles app, a
//! beta build), each with its own credentials. Registrations, topics and
//! notifications belong to one app; `default` is the app the single-app
//! settings define.

/// The app of everything that names none.
pub const DEFAULT_APP: &str = "default";
/// Longest app id, in bytes.
pub const MAX_APP_ID_BYTES: usize = 63;
/// An app id: lower-case letters, digits, `-` and `_`, starting with a
/// letter or digit.
pub const APP_ID_PATTERN: &str = r"^[a-z0-9][a-z0-9_-]{0,62}$";

/// Why an app id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "app {0:?} is not an app id (1 to 63 lower-case letters, digits, `-` and `_`, starting with a letter or digit)"
)]
pub struct AppIdError(pub String);

/// Checks an app id.
pub fn validate_app(app: &str) -> Result<(), AppIdError> {
    let mut bytes = app.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if first_ok && rest_ok && app.len() <= MAX_APP_ID_BYTES {
        Ok(())
    } else {
        Err(AppIdError(app.chars().take(70).collect()))
    }
}

/// `true` for the default app (serde's `skip_serializing_if`).
pub fn is_default_app(app: &str) -> bool {
    app == DEFAULT_APP
}

/// The default app id, owned (serde's `default`).
pub fn default_app() -> String {
    DEFAULT_APP.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_states_the_rule() {
        let pattern = regex::Regex::new(APP_ID_PATTERN).unwrap();
        for app in [
            "default",
            "puzzles",
            "news-beta",
            "a",
            "9_x",
            "",
            "News",
            "-a",
            "a b",
            &"a".repeat(64),
        ] {
            assert_eq!(pattern.is_match(app), validate_app(app).is_ok(), "{app:?}");
        }
    }
}
