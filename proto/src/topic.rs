//! Topic names: `/`-separated segments such as `breaking/uk`.
//!
//! A segment holds letters, digits and `-`, `_`, `.`, `~`; segments are never
//! empty, so a name neither starts nor ends with `/` and never holds `//`.

/// Longest topic name accepted, in bytes.
pub const MAX_TOPIC_LEN: usize = 128;

/// The rules above as a regular expression (ECMA 262, Python and Rust read
/// it alike), for the OpenAPI description; [`validate_topic`] agrees with it
/// (with a length of at most [`MAX_TOPIC_LEN`]).
pub const TOPIC_PATTERN: &str = r"^[A-Za-z0-9._~-]+(?:/[A-Za-z0-9._~-]+)*$";

/// Why a topic name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    #[error("a topic name is empty")]
    Empty,
    #[error("topic {topic:?} is longer than {MAX_TOPIC_LEN} bytes")]
    TooLong { topic: String },
    #[error("topic {topic:?} has an empty segment (leading, trailing or doubled '/')")]
    EmptySegment { topic: String },
    #[error(
        "topic {topic:?} holds {found:?}; allowed are letters, digits, '-', '_', '.', '~' and '/' between segments"
    )]
    BadCharacter { topic: String, found: char },
}

/// Checks one topic name against the rules above.
pub fn validate_topic(topic: &str) -> Result<(), TopicError> {
    if topic.is_empty() {
        return Err(TopicError::Empty);
    }
    if topic.len() > MAX_TOPIC_LEN {
        return Err(TopicError::TooLong {
            topic: truncated(topic),
        });
    }
    if let Some(found) = topic.chars().find(|c| !is_topic_char(*c)) {
        return Err(TopicError::BadCharacter {
            topic: topic.to_owned(),
            found,
        });
    }
    if topic.split('/').any(str::is_empty) {
        return Err(TopicError::EmptySegment {
            topic: topic.to_owned(),
        });
    }
    Ok(())
}

fn is_topic_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~' | '/')
}

fn truncated(topic: &str) -> String {
    let mut end = 32.min(topic.len());
    while !topic.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &topic[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_slashed_names() {
        for topic in [
            "breaking",
            "breaking/uk",
            "sport/football/premier-league",
            "a.b~c_d",
        ] {
            assert_eq!(validate_topic(topic), Ok(()), "{topic}");
        }
    }

    #[test]
    fn refuses_malformed_names() {
        assert_eq!(validate_topic(""), Err(TopicError::Empty));
        for topic in ["/uk", "uk/", "breaking//uk"] {
            assert!(
                matches!(validate_topic(topic), Err(TopicError::EmptySegment { .. })),
                "{topic}"
            );
        }
        assert!(matches!(
            validate_topic("breaking news"),
            Err(TopicError::BadCharacter { found: ' ', .. })
        ));
        assert!(matches!(
            validate_topic(&"a".repeat(MAX_TOPIC_LEN + 1)),
            Err(TopicError::TooLong { .. })
        ));
        assert_eq!(validate_topic(&"a".repeat(MAX_TOPIC_LEN)), Ok(()));
    }

    fn pattern() -> regex::Regex {
        regex::Regex::new(TOPIC_PATTERN).unwrap()
    }

    #[test]
    fn the_pattern_states_the_rules() {
        for topic in [
            "breaking",
            "breaking/uk",
            "a.b~c_d/-",
            "",
            "/uk",
            "uk/",
            "a//b",
            "a b",
            "é",
            "a\n",
        ] {
            assert_eq!(
                pattern().is_match(topic),
                validate_topic(topic).is_ok(),
                "{topic:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn the_pattern_agrees_with_validation(topic in "[a-z/._~ é-]{0,12}") {
            prop_assert_eq!(pattern().is_match(&topic), validate_topic(&topic).is_ok());
        }

        #[test]
        fn generated_valid_names_pass(segments in proptest::collection::vec("[a-zA-Z0-9._~-]{1,10}", 1..8)) {
            let topic = segments.join("/");
            prop_assume!(topic.len() <= MAX_TOPIC_LEN);
            prop_assert_eq!(validate_topic(&topic), Ok(()));
        }

        #[test]
        fn never_panics(topic in ".{0,200}") {
            let _ = validate_topic(&topic);
        }
    }
}
