//! The order of release: lane first, then smallest remaining audience.
//!
//! Within a lane the relay serves the notification with the fewest tokens
//! still to release (shortest remaining work first): a small alert never
//! waits for a big send that started earlier, the mean time to finish is
//! the least any order gives, and of two equal sends the one sent first
//! keeps its lead (it has less left), so it finishes first — what an
//! editor expects. A big send can only be held back by smaller ones, and a
//! newsroom sends a few alerts an hour, not a stream.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::lanes::Lane;

/// A figure per platform.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerPlatform<T> {
    pub ios: T,
    pub android: T,
}

impl<T: Copy> PerPlatform<T> {
    pub fn map<U>(self, f: impl Fn(T) -> U) -> PerPlatform<U> {
        PerPlatform {
            ios: f(self.ios),
            android: f(self.android),
        }
    }
}

/// A notification in flight, as the relay sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct InFlight {
    pub id: Uuid,
    pub lane: Lane,
    pub created_at: DateTime<Utc>,
    pub jobs_planned: u32,
    /// Jobs the broker confirmed.
    pub jobs_released: u32,
    /// Jobs still in the outbox.
    pub jobs_waiting: u32,
    /// Jobs whose harvest was reported (done or failed).
    pub jobs_reported: u32,
    /// The planner's audience estimate (`None`: some topic size was unknown).
    pub audience_estimate: Option<u64>,
    /// Tokens the reported harvests found.
    pub harvested: PerPlatform<u64>,
    /// Tokens whose outcome the dispatchers reported.
    pub reported: PerPlatform<u64>,
}

impl InFlight {
    /// Tokens one of its jobs is expected to hold: the planner's estimate
    /// spread over its jobs; without one (a topic's size was not known),
    /// what its harvested jobs held on average, and `fallback` until the
    /// first is reported.
    pub fn tokens_per_job(&self, fallback: u64) -> u64 {
        match self.audience_estimate {
            Some(estimate) => estimate.div_ceil(u64::from(self.jobs_planned.max(1))).max(1),
            None if self.jobs_reported > 0 => {
                let harvested = self.harvested.ios + self.harvested.android;
                harvested.div_ceil(u64::from(self.jobs_reported)).max(1)
            }
            None => fallback.max(1),
        }
    }

    /// Tokens released and not yet reported, per platform. A released job
    /// whose harvest is not reported yet counts in full on both platforms:
    /// it is short-lived (harvesting is much faster than pushing) and may
    /// hold either.
    pub fn outstanding(&self, fallback: u64) -> PerPlatform<u64> {
        let unharvested =
            u64::from(self.jobs_released.saturating_sub(self.jobs_reported)) * self.tokens_per_job(fallback);
        PerPlatform {
            ios: (self.harvested.ios + unharvested).saturating_sub(self.reported.ios),
            android: (self.harvested.android + unharvested).saturating_sub(self.reported.android),
        }
    }

    /// Tokens still to release.
    pub fn remaining(&self, fallback: u64) -> u64 {
        u64::from(self.jobs_waiting) * self.tokens_per_job(fallback)
    }
}

/// Tokens released and not yet reported, per platform, over all `in_flight`.
pub fn total_outstanding(in_flight: &[InFlight], fallback_tokens_per_job: u64) -> PerPlatform<u64> {
    in_flight.iter().fold(PerPlatform::default(), |sum, n| {
        let out = n.outstanding(fallback_tokens_per_job);
        PerPlatform {
            ios: sum.ios + out.ios,
            android: sum.android + out.android,
        }
    })
}

/// What to release now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    pub notification_id: Uuid,
    pub lane: Lane,
    pub jobs: u32,
}

/// The next jobs to release, or `None` when nothing waits or every
/// platform's queues already hold their `budget`: the most urgent lane's
/// notification with the least left to release, as many of its jobs as
/// fill the room left (at least one, at most `max_jobs`).
///
/// A platform with room is enough: a platform whose dispatchers stalled
/// must not stop the other platform's deliveries (its queue then grows, as
/// it would without scheduling).
pub fn next_release(
    in_flight: &[InFlight],
    budget: PerPlatform<u64>,
    fallback_tokens_per_job: u64,
    max_jobs: u32,
) -> Option<Release> {
    let outstanding = total_outstanding(in_flight, fallback_tokens_per_job);
    let room =
        budget.ios.saturating_sub(outstanding.ios) + budget.android.saturating_sub(outstanding.android);
    if room == 0 {
        return None;
    }
    let next = in_flight
        .iter()
        .filter(|n| n.jobs_waiting > 0)
        .min_by_key(|n| (n.lane, n.remaining(fallback_tokens_per_job), n.created_at, n.id))?;
    let per_job = next.tokens_per_job(fallback_tokens_per_job);
    let wanted = u32::try_from(room.div_ceil(per_job)).unwrap_or(u32::MAX);
    Some(Release {
        notification_id: next.id,
        lane: next.lane,
        jobs: wanted.clamp(1, next.jobs_waiting.min(max_jobs.max(1))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    const PER_JOB: u64 = 10_000;

    fn send(n: u8, lane: Lane, audience: u64, released: u32) -> InFlight {
        let jobs = audience.div_ceil(PER_JOB).max(1) as u32;
        InFlight {
            id: Uuid::from_u128(u128::from(n)),
            lane,
            created_at: Utc
                .timestamp_opt(1_700_000_000 + i64::from(n), 0)
                .single()
                .unwrap_or_default(),
            jobs_planned: jobs,
            jobs_released: released,
            jobs_waiting: jobs - released,
            jobs_reported: 0,
            audience_estimate: Some(audience),
            harvested: PerPlatform::default(),
            reported: PerPlatform::default(),
        }
    }

    fn room(tokens: u64) -> PerPlatform<u64> {
        PerPlatform {
            ios: tokens,
            android: tokens,
        }
    }

    #[test]
    fn a_small_send_overtakes_a_big_one_of_its_lane() {
        let big = send(1, Lane::Standard, 2_000_000, 10);
        let small = send(2, Lane::Standard, 1_000, 0);
        let next = next_release(&[big, small.clone()], room(1_000_000), PER_JOB, 256);
        assert_eq!(next.map(|r| r.notification_id), Some(small.id));
    }

    #[test]
    fn an_urgent_send_goes_before_a_smaller_standard_or_bulk_one() {
        let bulk = send(1, Lane::Bulk, 1_000, 0);
        let standard = send(2, Lane::Standard, 5_000, 0);
        let urgent = send(3, Lane::Urgent, 1_000_000, 0);
        let all = [bulk.clone(), standard.clone(), urgent.clone()];
        assert_eq!(
            next_release(&all, room(1_000_000), PER_JOB, 256).map(|r| r.notification_id),
            Some(urgent.id)
        );
        assert_eq!(
            next_release(&[bulk, standard.clone()], room(1_000_000), PER_JOB, 256).map(|r| r.notification_id),
            Some(standard.id)
        );
    }

    #[test]
    fn of_two_equal_sends_the_first_keeps_its_lead() {
        let first = send(1, Lane::Standard, 1_000_000, 20);
        let second = send(2, Lane::Standard, 1_000_000, 0);
        let next = next_release(&[second, first.clone()], room(1_000_000), PER_JOB, 256);
        assert_eq!(next.map(|r| r.notification_id), Some(first.id));
    }

    #[test]
    fn nothing_is_released_while_both_platforms_are_full() {
        let mut big = send(1, Lane::Standard, 2_000_000, 10);
        big.jobs_reported = 10;
        big.harvested = PerPlatform {
            ios: 50_000,
            android: 50_000,
        };
        assert_eq!(next_release(&[big.clone()], room(50_000), PER_JOB, 256), None);
        // Reports free the room again.
        big.reported.ios = 20_000;
        let next = next_release(&[big], room(50_000), PER_JOB, 256);
        assert_eq!(next.map(|r| r.jobs), Some(2));
    }

    #[test]
    fn a_stalled_platform_does_not_hold_back_the_other() {
        let mut big = send(1, Lane::Standard, 2_000_000, 10);
        big.jobs_reported = 10;
        big.harvested = PerPlatform {
            ios: 50_000,
            android: 50_000,
        };
        big.reported.ios = 50_000;
        assert!(next_release(&[big], room(50_000), PER_JOB, 256).is_some());
    }

    #[test]
    fn released_jobs_not_yet_harvested_count_at_their_estimate() {
        let big = send(1, Lane::Standard, 100_000, 5);
        assert_eq!(big.outstanding(PER_JOB), room(50_000));
        assert_eq!(next_release(&[big], room(50_000), PER_JOB, 256), None);
    }

    #[test]
    fn an_unestimated_audience_is_judged_by_its_harvested_jobs() {
        let mut unknown = send(1, Lane::Standard, 1_200, 0);
        unknown.audience_estimate = None;
        unknown.jobs_planned = 64;
        unknown.jobs_waiting = 54;
        unknown.jobs_released = 10;
        assert_eq!(unknown.tokens_per_job(PER_JOB), PER_JOB, "nothing harvested yet");
        unknown.jobs_reported = 10;
        unknown.harvested = PerPlatform { ios: 0, android: 190 };
        assert_eq!(unknown.tokens_per_job(PER_JOB), 19);
        let next = next_release(&[unknown], room(50_000), PER_JOB, 256);
        assert_eq!(next.map(|r| r.jobs), Some(54), "the rest goes at once");
    }

    proptest! {
        #[test]
        fn a_release_never_exceeds_what_waits(
            audiences in proptest::collection::vec(1u64..3_000_000, 1..6),
            budget in 0u64..500_000,
            max_jobs in 1u32..300,
        ) {
            let sends: Vec<InFlight> = audiences
                .iter()
                .enumerate()
                .map(|(i, audience)| send(i as u8, Lane::ALL[i % 3], *audience, 0))
                .collect();
            match next_release(&sends, room(budget), PER_JOB, max_jobs) {
                None => prop_assert_eq!(budget, 0),
                Some(release) => {
                    let chosen = sends.iter().find(|n| n.id == release.notification_id).unwrap();
                    prop_assert!(release.jobs >= 1);
                    prop_assert!(release.jobs <= chosen.jobs_waiting.min(max_jobs));
                    // Nothing of a more urgent lane waits.
                    prop_assert!(sends.iter().all(|n| n.lane >= chosen.lane));
                }
            }
        }
    }
}
