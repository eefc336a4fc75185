//! The rules of a notification's presentation fields: a background push
//! carries none of an alert's, the badge and relevance score stay in range,
//! and sound, category and channel are short printable names.

use super::{Notification, PayloadError};
use crate::presentation::{DEFAULT_SOUND, MAX_BADGE, MAX_NAME_BYTES};

impl Notification {
    /// The sound to play: the named one, `default` when none was named,
    /// nothing for `"sound": null` and for background pushes.
    pub fn sound_name(&self) -> Option<&str> {
        if !self.push_type.is_alert() {
            return None;
        }
        match &self.sound {
            None => Some(DEFAULT_SOUND),
            Some(named) => named.as_deref(),
        }
    }

    /// The fields only an alert can carry, with whether each is set: a
    /// background push shows nothing, so it takes none of them.
    fn alert_only_fields(&self) -> [(&'static str, bool); 10] {
        [
            ("title", self.title.is_some()),
            ("body", !self.body.is_empty()),
            ("sound", matches!(self.sound, Some(Some(_)))),
            ("badge", self.badge.is_some()),
            ("image_url", self.image_url.is_some()),
            ("category", self.category.is_some()),
            ("interruption_level", self.interruption_level.is_some()),
            ("relevance_score", self.relevance_score.is_some()),
            ("android_channel_id", self.android_channel_id.is_some()),
            ("localizations", !self.localizations.is_empty()),
        ]
    }

    /// Checks the presentation fields (the text is checked beside it).
    pub(super) fn check_presentation(&self) -> Result<(), PayloadError> {
        if !self.push_type.is_alert()
            && let Some((field, _)) = self.alert_only_fields().into_iter().find(|(_, set)| *set)
        {
            return Err(PayloadError::NotForBackground(field));
        }
        if let Some(badge) = self.badge
            && badge > MAX_BADGE
        {
            return Err(PayloadError::BadgeTooLarge(badge));
        }
        if let Some(score) = self.relevance_score
            && !(0.0..=1.0).contains(&score)
        {
            return Err(PayloadError::RelevanceScore(score));
        }
        let names = [
            ("sound", self.sound.as_ref().and_then(Option::as_deref)),
            ("category", self.category.as_deref()),
            ("android_channel_id", self.android_channel_id.as_deref()),
        ];
        for (field, value) in names {
            if let Some(value) = value {
                check_name(field, value)?;
            }
        }
        Ok(())
    }
}

fn check_name(field: &'static str, value: &str) -> Result<(), PayloadError> {
    if let Some(bad) = value.chars().find(|c| !matches!(c, ' '..='~')) {
        return Err(PayloadError::NameCharacter(field, bad));
    }
    if value.trim().is_empty() {
        return Err(PayloadError::EmptyName(field));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(PayloadError::NameTooLong(field, value.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::sample;
    use super::*;
    use crate::presentation::{InterruptionLevel, NAME_PATTERN, PushType};

    fn background() -> Notification {
        Notification {
            push_type: PushType::Background,
            title: None,
            body: String::new(),
            image_url: None,
            ..sample()
        }
    }

    #[test]
    fn sound_is_default_when_absent_silent_when_null() {
        let read = |json: &str| serde_json::from_str::<Notification>(json).unwrap();
        let absent = read(r#"{"topics":["a"],"body":"x"}"#);
        assert_eq!(absent.sound_name(), Some("default"));
        let silent = read(r#"{"topics":["a"],"body":"x","sound":null}"#);
        assert_eq!(silent.sound_name(), None);
        let named = read(r#"{"topics":["a"],"body":"x","sound":"chime.caf"}"#);
        assert_eq!(named.sound_name(), Some("chime.caf"));
        for n in [absent, silent, named] {
            let again: Notification = serde_json::from_str(&serde_json::to_string(&n).unwrap()).unwrap();
            assert_eq!(again, n);
        }
    }

    #[test]
    fn a_background_push_takes_no_alert_field() {
        assert!(background().validated().is_ok());
        assert_eq!(background().sound_name(), None);
        type Case = (fn(&mut Notification), &'static str);
        let cases: [Case; 4] = [
            (|n| n.title = Some("t".into()), "title"),
            (|n| n.body = "b".into(), "body"),
            (|n| n.badge = Some(1), "badge"),
            (|n| n.sound = Some(Some("x".into())), "sound"),
        ];
        for (mutate, field) in cases {
            let mut n = background();
            mutate(&mut n);
            assert_eq!(n.validated(), Err(PayloadError::NotForBackground(field)));
        }
        let mut silent = background();
        silent.sound = Some(None);
        assert!(silent.validated().is_ok());
    }

    #[test]
    fn each_presentation_rule_has_its_error() {
        type Case = (fn(&mut Notification), PayloadError);
        let cases: Vec<Case> = vec![
            (
                |n| n.badge = Some(MAX_BADGE + 1),
                PayloadError::BadgeTooLarge(MAX_BADGE + 1),
            ),
            (
                |n| n.relevance_score = Some(1.5),
                PayloadError::RelevanceScore(1.5),
            ),
            (
                |n| n.relevance_score = Some(-0.1),
                PayloadError::RelevanceScore(-0.1),
            ),
            (
                |n| n.category = Some(" ".into()),
                PayloadError::EmptyName("category"),
            ),
            (
                |n| n.android_channel_id = Some("c".repeat(256)),
                PayloadError::NameTooLong("android_channel_id", 256),
            ),
            (
                |n| n.sound = Some(Some("a\u{0}".into())),
                PayloadError::NameCharacter("sound", '\u{0}'),
            ),
            (
                |n| n.category = Some("é".into()),
                PayloadError::NameCharacter("category", 'é'),
            ),
        ];
        for (mutate, expected) in cases {
            let mut n = sample();
            mutate(&mut n);
            assert_eq!(n.validated(), Err(expected));
        }
        let mut full = sample();
        full.badge = Some(0);
        full.relevance_score = Some(1.0);
        full.category = Some("NEWS".into());
        full.interruption_level = Some(InterruptionLevel::TimeSensitive);
        full.android_channel_id = Some("breaking".into());
        assert!(full.validated().is_ok());
    }

    #[test]
    fn the_name_pattern_states_the_rule() {
        let pattern = regex::Regex::new(NAME_PATTERN).unwrap();
        for value in ["chime.caf", "Breaking News", " x ", "", "  ", "é", "a\tb", "~"] {
            assert_eq!(
                pattern.is_match(value),
                check_name("sound", value).is_ok(),
                "{value:?}"
            );
        }
    }
}
