//! Pacing that shares a provider's per-project quota among the dispatcher
//! replicas sending for that project (FCM: 600,000 messages a minute per
//! Firebase project by default, whoever sends them).
//!
//! Each replica paces itself at its share: [`QUOTA_HEADROOM`] of the quota
//! divided by the replicas consuming the platform's queue, a figure the
//! broker reports (consumers on the queue / consumers per replica), read
//! every few seconds, so scaling from 3 to 12 replicas divides each one's
//! pace by four instead of quadrupling the fleet's. On a quota answer
//! (`429`, FCM `QUOTA_EXCEEDED`) the pace halves, at most once a
//! `CUT_COOLDOWN` (the answers to pushes already in flight are one
//! event), and climbs back by `CLIMB_PER_S` of the share each second: the
//! additive-increase / multiplicative-decrease that lets replicas which
//! disagree for a moment about how many they are settle under the quota.
//!
//! The pace is kept by one schedule of slots, each push reserving the next
//! one (`governor`, used for the fixed rate cap, cannot change its rate: a
//! limiter rebuilt at each step left the pushes waiting on the old ones
//! released at the old pace beside the new, and the fleet ran at 2.5 times
//! the quota for seconds while it climbed after a replica died).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The share of the quota the fleet aims at: room for other senders in the
/// project (the Firebase console, another service) and for the replicas'
/// clocks and counts disagreeing for a moment.
pub const QUOTA_HEADROOM: f64 = 0.95;
/// How often the pace follows the replica count and climbs after a cut.
const STEP: Duration = Duration::from_millis(250);
/// After a quota answer, further ones within this long do not cut again.
const CUT_COOLDOWN: Duration = Duration::from_secs(1);
/// Climb back towards the share by this much of it per second.
const CLIMB_PER_S: f64 = 0.1;
/// Never slower than this share of the share.
const FLOOR: f64 = 0.05;
/// An idle pacer lets this much of a burst through at once, no more.
const BURST: Duration = Duration::from_millis(50);

/// How many replicas share a quota: the consumers the broker counts on the
/// platform's queue, divided by each replica's consumers. At least one.
#[derive(Debug)]
pub struct Replicas {
    consumers: Arc<AtomicU32>,
    per_replica: u32,
}

impl Replicas {
    pub fn new(consumers: Arc<AtomicU32>, per_replica: u32) -> Self {
        Self {
            consumers,
            per_replica: per_replica.max(1),
        }
    }

    pub fn count(&self) -> u32 {
        self.consumers
            .load(Ordering::Relaxed)
            .div_ceil(self.per_replica)
            .max(1)
    }
}

/// One pacer per project, made on first use; none when the quota is 0.
pub struct Pacers {
    per_minute: u64,
    replicas: Arc<Replicas>,
    by_project: Mutex<HashMap<String, Arc<Pacer>>>,
}

impl Pacers {
    /// `per_minute`: each project's quota (0: no pacing).
    pub fn new(per_minute: u64, replicas: Replicas) -> Self {
        Self {
            per_minute,
            replicas: Arc::new(replicas),
            by_project: Mutex::default(),
        }
    }

    /// The pacer of `project`, or `None` when pushes are not paced.
    pub fn for_project(&self, project: Option<&str>) -> Option<Arc<Pacer>> {
        let project = project?;
        if self.per_minute == 0 {
            return None;
        }
        let mut pacers = self.by_project.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(pacer) = pacers.get(project) {
            return Some(pacer.clone());
        }
        let pacer = Arc::new(Pacer::new(self.per_minute, self.replicas.clone(), Instant::now()));
        pacers.insert(project.to_owned(), pacer.clone());
        Some(pacer)
    }
}

/// This replica's pace for one project.
pub struct Pacer {
    /// The whole fleet's target, pushes per second.
    fleet_per_s: f64,
    replicas: Arc<Replicas>,
    state: Mutex<Paced>,
}

struct Paced {
    aimd: Aimd,
    /// The next push's slot.
    next_slot: Instant,
}

impl Paced {
    /// Reserves the next slot at the current pace: never earlier than
    /// [`BURST`] before `now`, each one a pace's interval after the last.
    fn reserve(&mut self, now: Instant) -> Instant {
        let interval = Duration::from_secs_f64(1.0 / self.aimd.rate.max(1.0));
        let slot = self.next_slot.max(now.checked_sub(BURST).unwrap_or(now));
        self.next_slot = slot + interval;
        slot
    }
}

impl Pacer {
    fn new(per_minute: u64, replicas: Arc<Replicas>, now: Instant) -> Self {
        let fleet_per_s = per_minute as f64 / 60.0 * QUOTA_HEADROOM;
        let aimd = Aimd::new(fleet_per_s / f64::from(replicas.count()), now);
        Self {
            fleet_per_s,
            replicas,
            state: Mutex::new(Paced { aimd, next_slot: now }),
        }
    }

    /// Waits for this push's turn.
    pub async fn ready(&self) {
        let slot = {
            let mut paced = self.lock();
            let now = Instant::now();
            if now.duration_since(paced.aimd.adjusted) >= STEP {
                let share = self.fleet_per_s / f64::from(self.replicas.count());
                paced.aimd.step(share, now);
            }
            paced.reserve(now)
        };
        tokio::time::sleep_until(slot.into()).await;
    }

    /// The provider answered that the quota is exhausted.
    pub fn throttled(&self) {
        let mut paced = self.lock();
        if paced.aimd.cut(Instant::now()) {
            tracing::warn!(
                pushes_per_s = paced.aimd.rate as u64,
                "quota exceeded; pacing slower"
            );
        }
    }

    /// Pushes per second this replica now aims at.
    pub fn rate(&self) -> f64 {
        self.lock().aimd.rate
    }

    fn lock(&self) -> MutexGuard<'_, Paced> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The arithmetic of the pace, apart from time and locks.
#[derive(Debug, Clone, PartialEq)]
struct Aimd {
    /// Pushes per second aimed at now.
    rate: f64,
    /// This replica's share of the fleet's target.
    share: f64,
    adjusted: Instant,
    cut_at: Option<Instant>,
}

impl Aimd {
    fn new(share: f64, now: Instant) -> Self {
        Self {
            rate: share,
            share,
            adjusted: now,
            cut_at: None,
        }
    }

    /// Follows a new share at once when it shrank, climbing towards it
    /// otherwise. True when the pace moved enough to matter.
    fn step(&mut self, share: f64, now: Instant) -> bool {
        let elapsed = now.duration_since(self.adjusted).as_secs_f64();
        self.adjusted = now;
        self.share = share;
        let climbed = self.rate + share * CLIMB_PER_S * elapsed;
        let rate = climbed.min(share).max(share * FLOOR);
        let moved = (rate - self.rate).abs() > self.rate * 0.01;
        self.rate = rate;
        moved
    }

    /// Halves the pace, unless it was cut within the cooldown.
    fn cut(&mut self, now: Instant) -> bool {
        if self
            .cut_at
            .is_some_and(|at| now.duration_since(at) < CUT_COOLDOWN)
        {
            return false;
        }
        self.cut_at = Some(now);
        self.rate = (self.rate * 0.5).max(self.share * FLOOR);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn replicas_are_the_consumers_over_each_ones_consumers_and_at_least_one() {
        let consumers = Arc::new(AtomicU32::new(0));
        let replicas = Replicas::new(consumers.clone(), 4);
        assert_eq!(replicas.count(), 1, "before the broker said anything");
        consumers.store(12, Ordering::Relaxed);
        assert_eq!(replicas.count(), 3);
        consumers.store(9, Ordering::Relaxed);
        assert_eq!(replicas.count(), 3, "one replica still starting its consumers");
    }

    #[test]
    fn a_smaller_share_applies_at_once_a_larger_one_is_climbed_to() {
        let start = Instant::now();
        let mut aimd = Aimd::new(1000.0, start);
        assert!(aimd.step(500.0, start + SECOND));
        assert_eq!(aimd.rate, 500.0);
        // A replica went away: the share doubles, reached in steps of a
        // tenth of it per second.
        assert!(aimd.step(1000.0, start + 2 * SECOND));
        assert_eq!(aimd.rate, 600.0);
        aimd.step(1000.0, start + 5 * SECOND);
        assert_eq!(aimd.rate, 900.0);
        aimd.step(1000.0, start + 7 * SECOND);
        assert_eq!(aimd.rate, 1000.0);
        assert!(!aimd.step(1000.0, start + 8 * SECOND), "at the share it stays");
    }

    #[test]
    fn a_quota_answer_halves_the_pace_once_per_cooldown_and_never_below_the_floor() {
        let start = Instant::now();
        let mut aimd = Aimd::new(1000.0, start);
        assert!(aimd.cut(start));
        assert_eq!(aimd.rate, 500.0);
        assert!(
            !aimd.cut(start + Duration::from_millis(300)),
            "the same burst of answers"
        );
        assert!(aimd.cut(start + 2 * SECOND));
        assert_eq!(aimd.rate, 250.0);
        for s in 3..20 {
            aimd.cut(start + s * 2 * SECOND);
        }
        assert_eq!(aimd.rate, 1000.0 * FLOOR);
        aimd.step(1000.0, start + 41 * SECOND);
        assert!(aimd.rate > 1000.0 * FLOOR, "and it climbs back");
    }

    #[test]
    fn slots_follow_the_pace_and_an_idle_pacer_allows_only_a_short_burst() {
        let start = Instant::now();
        let mut paced = Paced {
            aimd: Aimd::new(100.0, start),
            next_slot: start,
        };
        let later = start + 10 * SECOND;
        let slots: Vec<Duration> = (0..8).map(|_| paced.reserve(later) - (later - BURST)).collect();
        assert_eq!(slots[0], Duration::ZERO, "up to a burst's worth in the past");
        assert_eq!(slots[7], Duration::from_millis(70), "then every 10 ms");
        // A faster pace applies from the next slot on, with no second
        // schedule beside the first.
        paced.aimd.rate = 1000.0;
        let next = paced.reserve(later);
        let after = paced.reserve(later);
        assert_eq!(after - next, Duration::from_millis(1));
    }

    #[test]
    fn pacers_are_per_project_and_none_without_a_quota_or_a_project() {
        let consumers = Arc::new(AtomicU32::new(6));
        let pacers = Pacers::new(120_000, Replicas::new(consumers.clone(), 2));
        let a = pacers.for_project(Some("news")).expect("paced");
        assert!(Arc::ptr_eq(&a, &pacers.for_project(Some("news")).expect("paced")));
        assert!(!Arc::ptr_eq(
            &a,
            &pacers.for_project(Some("puzzles")).expect("paced")
        ));
        // 120,000 a minute, 95% of it, over 3 replicas.
        assert!((a.rate() - 633.33).abs() < 0.01, "{}", a.rate());
        assert!(pacers.for_project(None).is_none(), "APNs has no such quota");
        let unpaced = Pacers::new(0, Replicas::new(consumers, 2));
        assert!(unpaced.for_project(Some("news")).is_none());
    }
}
