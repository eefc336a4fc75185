//! The topics a key may send to (keys file `topics = [...]`): exact topic
//! names, `prefix/*` for every topic under `prefix/` (`sport/*` allows
//! `sport/football` and `sport/football/results`, not `sport` itself), or
//! `*` for all. A key without `topics` may send to every topic.

use std::sync::Arc;

use clarion_proto::validate_topic;

/// One allowed topic or family of topics.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TopicPattern {
    Exact(String),
    /// The prefix with its trailing `/`.
    Under(String),
    Any,
}

impl TopicPattern {
    fn parse(pattern: &str) -> Result<Self, String> {
        if pattern == "*" {
            return Ok(TopicPattern::Any);
        }
        if let Some(prefix) = pattern.strip_suffix("/*") {
            validate_topic(prefix).map_err(|err| format!("topic pattern {pattern:?}: {err}"))?;
            return Ok(TopicPattern::Under(format!("{prefix}/")));
        }
        validate_topic(pattern).map_err(|err| {
            format!("topic pattern {pattern:?}: {err} (a family of topics is written `prefix/*`)")
        })?;
        Ok(TopicPattern::Exact(pattern.to_owned()))
    }

    fn allows(&self, topic: &str) -> bool {
        match self {
            TopicPattern::Exact(name) => name == topic,
            TopicPattern::Under(prefix) => topic.starts_with(prefix.as_str()),
            TopicPattern::Any => true,
        }
    }
}

/// The topics one key may send to.
#[derive(Debug, Clone, Default)]
pub struct TopicRules {
    /// `None`: every topic.
    patterns: Option<Arc<(Vec<TopicPattern>, String)>>,
}

impl TopicRules {
    /// Every topic (a key without `topics`).
    pub const ALL: TopicRules = TopicRules { patterns: None };

    /// The rules of a keys file's `topics` list.
    pub fn parse(patterns: &[String]) -> Result<Self, String> {
        if patterns.is_empty() {
            return Err("`topics` is empty (leave it out for every topic)".into());
        }
        let parsed = patterns
            .iter()
            .map(|pattern| TopicPattern::parse(pattern.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            patterns: Some(Arc::new((parsed, patterns.join(", ")))),
        })
    }

    /// The first of `topics` these rules leave out, if any.
    pub fn first_refused<'a>(&self, topics: &'a [String]) -> Option<&'a str> {
        let (patterns, _) = self.patterns.as_deref()?;
        topics
            .iter()
            .find(|topic| !patterns.iter().any(|pattern| pattern.allows(topic)))
            .map(String::as_str)
    }

    /// The patterns as the keys file gave them, comma-separated.
    pub fn describe(&self) -> &str {
        self.patterns.as_deref().map_or("*", |(_, text)| text.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(patterns: &[&str]) -> TopicRules {
        TopicRules::parse(&patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn topics(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_family_allows_what_is_under_it_and_nothing_else() {
        let sport = rules(&["sport/*", "weather/london"]);
        assert_eq!(
            sport.first_refused(&topics(&["sport/football", "sport/a/b"])),
            None
        );
        assert_eq!(sport.first_refused(&topics(&["weather/london"])), None);
        assert_eq!(
            sport.first_refused(&topics(&["sport/football", "breaking/uk"])),
            Some("breaking/uk")
        );
        assert_eq!(sport.first_refused(&topics(&["sport"])), Some("sport"));
        assert_eq!(sport.first_refused(&topics(&["sportsman"])), Some("sportsman"));
        assert_eq!(
            sport.first_refused(&topics(&["weather/london/west"])),
            Some("weather/london/west")
        );
        assert_eq!(sport.describe(), "sport/*, weather/london");
        assert_eq!(rules(&["*"]).first_refused(&topics(&["anything"])), None);
        assert_eq!(TopicRules::ALL.first_refused(&topics(&["anything"])), None);
    }

    #[test]
    fn malformed_patterns_are_refused_at_load() {
        for bad in [&[][..], &["sport/**"], &["sp ort/*"], &["/*"], &["sport*"]] {
            let bad: Vec<String> = bad.iter().map(|p| p.to_string()).collect();
            assert!(TopicRules::parse(&bad).is_err(), "{bad:?}");
        }
    }
}
