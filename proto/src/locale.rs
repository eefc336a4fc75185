//! Localised texts: a device's BCP 47 language tag (`fr-CA`), a
//! notification's `localizations`, and which of them a device gets — the
//! most specific match (`fr-CA`, then `fr`), else the default text.
//!
//! Tags are compared without regard to case, as BCP 47 says; they are kept
//! in lower case (`fr-ca`) once checked.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Longest language tag, in bytes (a language, script, region and a
/// variant, as devices report them, fit well within it).
pub const MAX_LOCALE_BYTES: usize = 35;
/// Most localised texts one notification may carry.
pub const MAX_LOCALIZATIONS: usize = 50;
/// A language tag as Clarion takes it: a 2–3 letter language, then subtags
/// of 1–8 letters or digits, separated by `-`.
pub const LOCALE_PATTERN: &str = r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*$";

/// One localised text of a notification.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalizedText {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub body: String,
}

/// Why a language tag was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocaleError {
    #[error(
        "locale {0:?} is not a language tag like `fr` or `fr-CA` (2–3 letters, then `-` and 1–8 letters or digits)"
    )]
    Malformed(String),
    #[error("locale is {0} bytes; the limit is {MAX_LOCALE_BYTES}")]
    TooLong(usize),
}

/// Checks a language tag and returns it in lower case.
pub fn normalize_locale(tag: &str) -> Result<String, LocaleError> {
    if tag.len() > MAX_LOCALE_BYTES {
        return Err(LocaleError::TooLong(tag.len()));
    }
    let mut subtags = tag.split('-');
    let language = subtags.next().unwrap_or_default();
    let language_ok = (2..=3).contains(&language.len()) && language.bytes().all(|b| b.is_ascii_alphabetic());
    let rest_ok = subtags.all(|s| (1..=8).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric()));
    if !language_ok || !rest_ok {
        return Err(LocaleError::Malformed(tag.chars().take(40).collect()));
    }
    Ok(tag.to_ascii_lowercase())
}

/// The key of `localizations` a device with `locale` gets: the tag itself,
/// else each shorter prefix of it (`zh-hant-tw`, `zh-hant`, `zh`); `None`
/// for the default text. Both sides are lower case.
pub fn best_match<'a, T>(localizations: &'a BTreeMap<String, T>, locale: Option<&str>) -> Option<&'a str> {
    let mut tag = locale?;
    loop {
        if let Some((key, _)) = localizations.get_key_value(tag) {
            return Some(key.as_str());
        }
        tag = &tag[..tag.rfind('-')?];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_checked_and_lower_cased() {
        assert_eq!(normalize_locale("fr-CA"), Ok("fr-ca".into()));
        assert_eq!(normalize_locale("zh-Hant-TW"), Ok("zh-hant-tw".into()));
        assert_eq!(normalize_locale("de"), Ok("de".into()));
        for bad in [
            "",
            "f",
            "fr_CA",
            "fr-",
            "-fr",
            "français",
            "fr-toolongsubtag",
            "12",
        ] {
            assert!(
                matches!(normalize_locale(bad), Err(LocaleError::Malformed(_))),
                "{bad:?}"
            );
        }
        assert_eq!(
            normalize_locale(&format!("en{}", "-a".repeat(17))),
            Err(LocaleError::TooLong(36))
        );
    }

    #[test]
    fn the_most_specific_text_wins() {
        let texts: BTreeMap<String, ()> = ["fr", "fr-ca", "zh-hant"]
            .iter()
            .map(|k| (k.to_string(), ()))
            .collect();
        assert_eq!(best_match(&texts, Some("fr-ca")), Some("fr-ca"));
        assert_eq!(best_match(&texts, Some("fr-be")), Some("fr"));
        assert_eq!(best_match(&texts, Some("fr")), Some("fr"));
        assert_eq!(best_match(&texts, Some("zh-hant-tw")), Some("zh-hant"));
        assert_eq!(best_match(&texts, Some("zh")), None);
        assert_eq!(best_match(&texts, Some("de-de")), None);
        assert_eq!(best_match(&texts, None), None);
    }

    #[test]
    fn the_pattern_states_the_rule() {
        let pattern = regex::Regex::new(LOCALE_PATTERN).unwrap();
        for tag in [
            "fr",
            "fr-CA",
            "zh-Hant-TW",
            "f",
            "fr_CA",
            "fr-",
            "français",
            "es-419",
            "x",
        ] {
            assert_eq!(pattern.is_match(tag), normalize_locale(tag).is_ok(), "{tag:?}");
        }
    }
}
