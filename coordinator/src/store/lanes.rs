//! Lanes: what a notification may overtake.
//!
//! The job relay releases the shard jobs of every lane before the next one:
//! `urgent` (breaking news) first, then `standard` (the default), then
//! `bulk` (briefings, marketing), which yields to everything else.

use std::fmt;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A notification's lane.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    /// Breaking news: released before everything else.
    Urgent,
    /// Everything that is neither urgent nor bulk.
    #[default]
    Standard,
    /// Briefings and marketing: released only when nothing else waits.
    Bulk,
}

impl Lane {
    /// Every lane, in the order the relay serves them.
    pub const ALL: [Lane; 3] = [Lane::Urgent, Lane::Standard, Lane::Bulk];

    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Urgent => "urgent",
            Lane::Standard => "standard",
            Lane::Bulk => "bulk",
        }
    }

    /// The lane stored as `name`; `None` for anything else.
    pub fn parse(name: &str) -> Option<Self> {
        Lane::ALL.into_iter().find(|lane| lane.as_str() == name)
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_are_served_urgent_first_and_bulk_last() {
        let mut lanes = vec![Lane::Bulk, Lane::Urgent, Lane::Standard];
        lanes.sort();
        assert_eq!(lanes, Lane::ALL);
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for lane in Lane::ALL {
            assert_eq!(Lane::parse(lane.as_str()), Some(lane));
            assert_eq!(
                serde_json::to_value(lane).ok(),
                Some(serde_json::json!(lane.as_str()))
            );
        }
        assert_eq!(Lane::parse("express"), None);
        assert!(serde_json::from_str::<Lane>("\"express\"").is_err());
    }
}
