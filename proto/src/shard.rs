//! The stable token → shard hash and contiguous ranges of the shard space.
//!
//! Stored rows carry their shard, so both the hash function and
//! [`SHARD_SPACE`] are part of the data format: changing either would strand
//! every registration in the wrong shard. They are constants, never settings.

use std::fmt;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

/// Number of shards the token space is cut into.
pub const SHARD_SPACE: u16 = 1024;

/// The shard of a canonical token (see [`crate::platform::normalize_token`]):
/// XXH3-64 of its bytes modulo [`SHARD_SPACE`]. XXH3's output is fixed by its
/// specification, so the value is the same on every machine and release.
pub fn shard_of(token: &str) -> u16 {
    (xxh3_64(token.as_bytes()) % u64::from(SHARD_SPACE)) as u16
}

/// A half-open range `start..end` of shards, never empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawRange", into = "RawRange")]
pub struct ShardRange {
    start: u16,
    end: u16,
}

/// Why a shard range is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shard range {start}..{end} is not a non-empty range within 0..{SHARD_SPACE}")]
pub struct ShardRangeError {
    pub start: u16,
    pub end: u16,
}

impl ShardRange {
    /// `start..end`; refused when empty or beyond [`SHARD_SPACE`].
    pub fn new(start: u16, end: u16) -> Result<Self, ShardRangeError> {
        if start < end && end <= SHARD_SPACE {
            Ok(Self { start, end })
        } else {
            Err(ShardRangeError { start, end })
        }
    }

    /// The whole shard space.
    pub fn full() -> Self {
        Self {
            start: 0,
            end: SHARD_SPACE,
        }
    }

    pub fn start(self) -> u16 {
        self.start
    }

    /// One past the last shard of the range.
    pub fn end(self) -> u16 {
        self.end
    }

    /// Number of shards in the range (at least one).
    pub fn len(self) -> u16 {
        self.end - self.start
    }

    /// Always false: a range holds at least one shard.
    pub fn is_empty(self) -> bool {
        false
    }

    pub fn contains(self, shard: u16) -> bool {
        (self.start..self.end).contains(&shard)
    }

    /// Cuts the range into `parts` contiguous ranges whose lengths differ by at
    /// most one; `parts` is clamped to `1..=len()`.
    pub fn split(self, parts: u16) -> Vec<ShardRange> {
        let parts = parts.clamp(1, self.len());
        let base = self.len() / parts;
        let extra = self.len() % parts;
        let mut start = self.start;
        (0..parts)
            .map(|i| {
                let len = base + u16::from(i < extra);
                let range = ShardRange {
                    start,
                    end: start + len,
                };
                start += len;
                range
            })
            .collect()
    }
}

impl fmt::Display for ShardRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

#[derive(Serialize, Deserialize)]
struct RawRange {
    start: u16,
    end: u16,
}

impl TryFrom<RawRange> for ShardRange {
    type Error = ShardRangeError;

    fn try_from(raw: RawRange) -> Result<Self, Self::Error> {
        ShardRange::new(raw.start, raw.end)
    }
}

impl From<ShardRange> for RawRange {
    fn from(range: ShardRange) -> Self {
        RawRange {
            start: range.start,
            end: range.end,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hash_values_are_pinned() {
        // Stored rows depend on these exact values: a change here is a data migration.
        assert_eq!(shard_of(""), 194);
        assert_eq!(
            shard_of("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
            770
        );
        assert_eq!(shard_of("breaking-news-device"), 581);
    }

    #[test]
    fn split_covers_the_range_in_order() {
        let parts = ShardRange::full().split(3);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0], ShardRange::new(0, 342).unwrap());
        assert_eq!(parts[1], ShardRange::new(342, 683).unwrap());
        assert_eq!(parts[2], ShardRange::new(683, 1024).unwrap());
    }

    #[test]
    fn empty_or_out_of_space_ranges_are_refused() {
        assert!(ShardRange::new(5, 5).is_err());
        assert!(ShardRange::new(6, 5).is_err());
        assert!(ShardRange::new(0, SHARD_SPACE + 1).is_err());
        let json = r#"{"start":9,"end":3}"#;
        assert!(serde_json::from_str::<ShardRange>(json).is_err());
    }

    proptest! {
        #[test]
        fn shard_is_in_space_and_stable(token in ".{0,300}") {
            let shard = shard_of(&token);
            prop_assert!(shard < SHARD_SPACE);
            prop_assert_eq!(shard, shard_of(&token.clone()));
        }

        #[test]
        fn split_is_a_contiguous_partition(start in 0u16..SHARD_SPACE, len in 1u16..=SHARD_SPACE, parts in 0u16..2000) {
            let end = (start + len).min(SHARD_SPACE);
            let range = ShardRange::new(start, end).unwrap();
            let pieces = range.split(parts);
            prop_assert_eq!(pieces.len() as u16, parts.clamp(1, range.len()));
            prop_assert_eq!(pieces[0].start(), range.start());
            prop_assert_eq!(pieces[pieces.len() - 1].end(), range.end());
            for pair in pieces.windows(2) {
                prop_assert_eq!(pair[0].end(), pair[1].start());
            }
            let min = pieces.iter().map(|p| p.len()).min().unwrap();
            let max = pieces.iter().map(|p| p.len()).max().unwrap();
            prop_assert!(max - min <= 1);
        }

        #[test]
        fn ranges_round_trip_through_json(start in 0u16..SHARD_SPACE, len in 1u16..=SHARD_SPACE) {
            let range = ShardRange::new(start, (start + len).min(SHARD_SPACE)).unwrap();
            let json = serde_json::to_string(&range).unwrap();
            prop_assert_eq!(serde_json::from_str::<ShardRange>(&json).unwrap(), range);
        }
    }
}
