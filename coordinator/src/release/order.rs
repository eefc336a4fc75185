//! The order of release: lane first, then smallest remaining audience.
//!
//! Within a lane the relay serves the notification with the fewest tokens
//! still to release (shortest remaining work first): a small alert never
//! waits for a big send that started earlier, the mean time to finish is
//! the least any order gives, and of two equal sends the one sent first
//! keeps its lead (it has less left), so it finishes first — what an
//! editor expects. A big send can only be held back by smaller ones, and a
//! newsroom sends a few alerts an hour, not a stream.

use clarion_proto::{PerPlatform, Platform};
use uuid::Uuid;

use crate::store::lanes::Lane;
use crate::store::outbox::InFlight;

// `InFlight` is read by `store::outbox::in_flight`; what it means for the
// release is here.
impl InFlight {
    /// Tokens one of its jobs is expected to hold: the planner's estimate
    /// spread over its jobs; without one (a topic's size was not known),
    /// what its harvested jobs held on average, and `fallback` until the
    /// first is reported.
    pub fn tokens_per_job(&self, fallback: u64) -> u64 {
        match self.audience_estimate {
            Some(estimate) => estimate.div_ceil(u64::from(self.jobs_planned.max(1))).max(1),
            None if self.jobs_reported > 0 => {
                let harvested = self.harvested.total();
                harvested.div_ceil(u64::from(self.jobs_reported)).max(1)
            }
            None => fallback.max(1),
        }
    }

    /// The share of its tokens each platform is expected to get: what its
    /// harvested jobs held; before any held a token, all of each job on
    /// every platform (the safe side: a job may hold any).
    pub fn platform_share(&self) -> PerPlatform<f64> {
        let harvested = self.harvested.total();
        if harvested == 0 {
            return PerPlatform::from_fn(|_| 1.0);
        }
        self.harvested.map(|tokens| tokens as f64 / harvested as f64)
    }

    /// Tokens one of its jobs is expected to put on each platform.
    pub fn tokens_per_job_on(&self, fallback: u64) -> PerPlatform<u64> {
        let per_job = self.tokens_per_job(fallback) as f64;
        self.platform_share().map(|share| (per_job * share).ceil() as u64)
    }

    /// Tokens released and not yet reported, per platform: what its
    /// harvested jobs held, plus its released jobs not harvested yet at
    /// their expected share, less what the dispatchers reported.
    pub fn outstanding(&self, fallback: u64) -> PerPlatform<u64> {
        let unharvested = u64::from(self.jobs_released.saturating_sub(self.jobs_reported));
        let per_job = self.tokens_per_job_on(fallback);
        PerPlatform::from_fn(|p| {
            (self.harvested[p] + unharvested * per_job[p]).saturating_sub(self.reported[p])
        })
    }

    /// Tokens still to release.
    pub fn remaining(&self, fallback: u64) -> u64 {
        u64::from(self.jobs_waiting) * self.tokens_per_job(fallback)
    }
}

/// Tokens released and not yet reported, per platform, over all `in_flight`.
pub fn total_outstanding(in_flight: &[InFlight], fallback_tokens_per_job: u64) -> PerPlatform<u64> {
    in_flight.iter().fold(PerPlatform::default(), |sum, n| {
        sum + n.outstanding(fallback_tokens_per_job)
    })
}

/// What to release now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    pub notification_id: Uuid,
    pub lane: Lane,
    pub jobs: u32,
}

/// Jobs that always fit on a platform, whatever its budget.
const DOUBLE_BUFFERED: u64 = 2;

/// How much room each platform's queues have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// Tokens each platform may have outstanding.
    pub budget: PerPlatform<u64>,
    /// Platforms whose dispatchers made no progress for a while with work
    /// outstanding: they do not hold back the other platform's jobs.
    pub stalled: PerPlatform<bool>,
}

/// The next jobs to release, or `None` when nothing waits or the next job
/// does not fit: the most urgent lane's notification with the least left
/// to release, as many of its jobs as fit in the room every platform they
/// go to has left (at most `max_jobs`).
///
/// A job fits when the tokens it is expected to put on each platform fit
/// under that platform's budget, which always has room for two jobs. The choice is strict: when the
/// first in line does not fit, nothing behind it goes either.
///
/// A stalled platform is left out of the reckoning: its dispatchers must
/// not stop the other platform's deliveries (its queue then grows, as it
/// would without scheduling). A job only for stalled platforms waits.
pub fn next_release(
    in_flight: &[InFlight],
    room: Room,
    fallback_tokens_per_job: u64,
    max_jobs: u32,
) -> Option<Release> {
    let next = in_flight
        .iter()
        .filter(|n| n.jobs_waiting > 0)
        .min_by_key(|n| (n.lane, n.remaining(fallback_tokens_per_job), n.sent_at, n.id))?;
    let outstanding = total_outstanding(in_flight, fallback_tokens_per_job);
    let per_job = next.tokens_per_job_on(fallback_tokens_per_job);
    let mut fitting: Option<u64> = None;
    for platform in Platform::ALL {
        let (per_job, budget, outstanding, stalled) = (
            per_job[platform],
            room.budget[platform],
            outstanding[platform],
            room.stalled[platform],
        );
        if per_job == 0 || stalled {
            continue;
        }
        // Room for two jobs at least, whatever the rate: one being
        // harvested while the last one's batches are pushed, so the
        // dispatchers never wait for a harvest (big jobs, a slow start).
        let budget = budget.max(per_job.saturating_mul(DOUBLE_BUFFERED));
        let fit = budget.saturating_sub(outstanding) / per_job;
        fitting = Some(fitting.map_or(fit, |other| other.min(fit)));
    }
    let jobs = u32::try_from(fitting?)
        .unwrap_or(u32::MAX)
        .min(next.jobs_waiting)
        .min(max_jobs.max(1));
    (jobs > 0).then_some(Release {
        notification_id: next.id,
        lane: next.lane,
        jobs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_proto::Platform;

    /// A figure on each of the two platforms the tests use.
    fn both<T: Default>(ios: T, android: T) -> PerPlatform<T> {
        let mut figures = PerPlatform::default();
        figures[Platform::Ios] = ios;
        figures[Platform::Android] = android;
        figures
    }
    use chrono::{TimeZone, Utc};
    use proptest::prelude::*;

    const PER_JOB: u64 = 10_000;

    fn send(n: u8, lane: Lane, audience: u64, released: u32) -> InFlight {
        let jobs = audience.div_ceil(PER_JOB).max(1) as u32;
        InFlight {
            id: Uuid::from_u128(u128::from(n)),
            lane,
            sent_at: Utc
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

    fn room(tokens: u64) -> Room {
        Room {
            budget: PerPlatform::from_fn(|_| tokens),
            stalled: PerPlatform::default(),
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

    /// A big send with 10 jobs released and harvested, half of each job
    /// on each platform: 50,000 tokens outstanding per platform.
    fn harvested_big() -> InFlight {
        let mut big = send(1, Lane::Standard, 2_000_000, 10);
        big.jobs_reported = 10;
        big.harvested = both(50_000, 50_000);
        big
    }

    #[test]
    fn nothing_is_released_while_a_platform_is_full() {
        let mut big = harvested_big();
        assert_eq!(next_release(&[big.clone()], room(50_000), PER_JOB, 256), None);
        // Room on one platform is not enough: the next job goes to both.
        big.reported[Platform::Ios] = 20_000;
        assert_eq!(next_release(&[big.clone()], room(50_000), PER_JOB, 256), None);
        // Reports on both free room for as many jobs as fit: each puts
        // 5,000 tokens on each platform.
        big.reported[Platform::Android] = 20_000;
        let next = next_release(&[big], room(50_000), PER_JOB, 256);
        assert_eq!(next.map(|r| r.jobs), Some(4));
    }

    #[test]
    fn a_job_goes_only_when_it_fits() {
        let mut big = harvested_big();
        big.reported = both(4_000, 4_000);
        assert_eq!(
            next_release(&[big.clone()], room(50_000), PER_JOB, 256),
            None,
            "4,000 tokens of room, a job needs 5,000"
        );
        big.reported[Platform::Ios] = 5_000;
        big.reported[Platform::Android] = 5_000;
        assert_eq!(
            next_release(&[big], room(50_000), PER_JOB, 256).map(|r| r.jobs),
            Some(1)
        );
    }

    #[test]
    fn two_jobs_fit_whatever_the_budget() {
        let single = send(1, Lane::Standard, 1_000_000, 0);
        let next = next_release(std::slice::from_ref(&single), room(1_000), PER_JOB, 256);
        assert_eq!(next.map(|r| r.jobs), Some(2));
        let mut one_out = single;
        one_out.jobs_released = 1;
        one_out.jobs_waiting -= 1;
        let next = next_release(&[one_out.clone()], room(1_000), PER_JOB, 256);
        assert_eq!(next.map(|r| r.jobs), Some(1));
        one_out.jobs_released = 2;
        one_out.jobs_waiting -= 1;
        assert_eq!(next_release(&[one_out], room(1_000), PER_JOB, 256), None);
    }

    #[test]
    fn a_stalled_platform_does_not_hold_back_the_other() {
        let mut big = harvested_big();
        big.reported[Platform::Ios] = 50_000;
        assert_eq!(next_release(&[big.clone()], room(50_000), PER_JOB, 256), None);
        let mut android_stalled = room(50_000);
        android_stalled.stalled[Platform::Android] = true;
        let next = next_release(&[big.clone()], android_stalled, PER_JOB, 256);
        assert_eq!(next.map(|r| r.jobs), Some(10));
        // A job only for stalled platforms waits.
        android_stalled.stalled[Platform::Ios] = true;
        assert_eq!(next_release(&[big], android_stalled, PER_JOB, 256), None);
    }

    #[test]
    fn released_jobs_not_yet_harvested_count_at_their_estimate() {
        let big = send(1, Lane::Standard, 100_000, 5);
        assert_eq!(big.outstanding(PER_JOB), room(50_000).budget);
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
        unknown.harvested = both(0, 190);
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
            // Nothing is outstanding: the first in line always goes.
            match next_release(&sends, room(budget), PER_JOB, max_jobs) {
                None => prop_assert!(false, "nothing released"),
                Some(release) => {
                    let chosen = sends.iter().find(|n| n.id == release.notification_id).unwrap();
                    prop_assert!(release.jobs >= 1);
                    prop_assert!(release.jobs <= chosen.jobs_waiting.min(max_jobs));
                    // More than two jobs only when they fit the budget.
                    let per_job = chosen.tokens_per_job_on(PER_JOB);
                    prop_assert!(release.jobs <= 2 || u64::from(release.jobs) * per_job[Platform::Ios] <= budget);
                    // Nothing of a more urgent lane waits.
                    prop_assert!(sends.iter().all(|n| n.lane >= chosen.lane));
                }
            }
        }
    }
}
