//! Cutting a notification's audience into shard jobs.
//!
//! A job is a contiguous range of the shard space covering all of the
//! notification's topics. Tokens hash uniformly into shards, so a range of
//! `k` shards holds about `k / SHARD_SPACE` of the audience; the plan picks
//! the number of equal ranges that puts about `tokens_per_job` tokens in
//! each. Overlapping topics make the estimate (a sum of topic sizes) high,
//! which only makes jobs a little smaller.

use clarion_proto::{SHARD_SPACE, ShardRange};

/// Jobs planned when some topic's size is not known yet: enough parallelism
/// for a large topic, few enough to cost nothing for a small one.
pub const UNKNOWN_AUDIENCE_JOBS: u16 = 64;

/// What planning knows about the audience.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AudienceEstimate {
    /// Sum of the known topic sizes.
    pub known: u64,
    /// Topics whose size is not cached yet.
    pub unknown_topics: usize,
}

/// The shard ranges of a notification's jobs, in order; never empty.
pub fn plan(estimate: AudienceEstimate, tokens_per_job: u64) -> Vec<ShardRange> {
    let wanted = estimate.known.div_ceil(tokens_per_job.max(1)).max(1);
    let mut jobs = u16::try_from(wanted).unwrap_or(SHARD_SPACE).min(SHARD_SPACE);
    if estimate.unknown_topics > 0 {
        jobs = jobs.max(UNKNOWN_AUDIENCE_JOBS);
    }
    ShardRange::full().split(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_two_million_topic_gets_two_hundred_jobs() {
        let jobs = plan(
            AudienceEstimate {
                known: 2_000_000,
                unknown_topics: 0,
            },
            10_000,
        );
        assert_eq!(jobs.len(), 200);
    }

    #[test]
    fn an_empty_or_unknown_audience_still_gets_a_plan() {
        assert_eq!(
            plan(AudienceEstimate::default(), 10_000),
            vec![ShardRange::full()]
        );
        let unknown = plan(
            AudienceEstimate {
                known: 0,
                unknown_topics: 1,
            },
            10_000,
        );
        assert_eq!(unknown.len(), usize::from(UNKNOWN_AUDIENCE_JOBS));
    }

    proptest! {
        #[test]
        fn job_count_tracks_the_audience(known in 0u64..50_000_000, per_job in 1u64..100_000, unknown in 0usize..3) {
            let jobs = plan(AudienceEstimate { known, unknown_topics: unknown }, per_job);
            let needed = known.div_ceil(per_job).clamp(1, u64::from(SHARD_SPACE));
            let floor = if unknown > 0 { u64::from(UNKNOWN_AUDIENCE_JOBS) } else { 1 };
            prop_assert_eq!(jobs.len() as u64, needed.max(floor));
            // Unless the shard space runs out, no job expects more than its share.
            if needed < u64::from(SHARD_SPACE) {
                let per_shard = known as f64 / f64::from(SHARD_SPACE);
                let largest = jobs.iter().map(|r| r.len()).max().unwrap();
                prop_assert!(per_shard * f64::from(largest) <= per_job as f64 * 1.01 + per_shard);
            }
            // The ranges partition the shard space.
            prop_assert_eq!(jobs[0].start(), 0);
            prop_assert_eq!(jobs[jobs.len() - 1].end(), SHARD_SPACE);
            for pair in jobs.windows(2) {
                prop_assert_eq!(pair[0].end(), pair[1].start());
            }
        }

        #[test]
        fn bigger_audiences_never_get_fewer_jobs(a in 0u64..20_000_000, b in 0u64..20_000_000) {
            let (small, large) = (a.min(b), a.max(b));
            let jobs = |known| plan(AudienceEstimate { known, unknown_topics: 0 }, 10_000).len();
            prop_assert!(jobs(small) <= jobs(large));
        }
    }
}
