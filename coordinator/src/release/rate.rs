//! The delivery rate the relay budgets with, measured from the reports.
//!
//! Each relay round reads how many tokens every notification in flight has
//! had reported; the growth between rounds, over a sliding window, is the
//! rate at which the dispatchers of each platform get through their
//! queues. The highest rate seen decays slowly (half-life `PEAK_HALF_LIFE`)
//! and is used while it is higher, so the next send starts with the budget
//! the last one earned instead of ramping up from the floor.
//!
//! It also tells which platform has stalled: work outstanding and nothing
//! reported for [`STALL_AFTER`] (a provider outage, dispatchers down), so
//! that the other platform's deliveries do not wait for it.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use uuid::Uuid;

use clarion_proto::PerPlatform;

use crate::store::outbox::InFlight;

/// How long the remembered peak rate takes to halve.
const PEAK_HALF_LIFE: Duration = Duration::from_secs(60);
/// A window shorter than this measures nothing yet.
const SHORTEST_SPAN: Duration = Duration::from_millis(200);
/// Samples kept at most (a round every few milliseconds for the window).
const MOST_SAMPLES: usize = 4096;
/// A platform with work outstanding that reports nothing for this long has
/// stalled (a batch of 2,000 at a slow provider's pace reports well within).
pub const STALL_AFTER: Duration = Duration::from_secs(10);

pub struct RateMeter {
    window: Duration,
    /// Tokens reported per notification at the previous round.
    last: HashMap<Uuid, PerPlatform<u64>>,
    /// Tokens reported between rounds, by the time of the later round.
    samples: VecDeque<(Instant, PerPlatform<u64>)>,
    peak: Option<(Instant, PerPlatform<f64>)>,
    /// Per platform, since when it has had work outstanding and reported
    /// nothing.
    silent_since: PerPlatform<Option<Instant>>,
}

impl RateMeter {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            last: HashMap::new(),
            samples: VecDeque::new(),
            peak: None,
            silent_since: PerPlatform::default(),
        }
    }

    /// Records what the notifications in flight had reported at `now`, and
    /// the tokens `outstanding` on each platform.
    pub fn observe(&mut self, now: Instant, in_flight: &[InFlight], outstanding: PerPlatform<u64>) {
        let mut delta = PerPlatform::<u64>::default();
        for n in in_flight {
            if let Some(before) = self.last.get(&n.id) {
                delta = delta + n.reported.zip_with(*before, u64::saturating_sub);
            }
        }
        self.last = in_flight.iter().map(|n| (n.id, n.reported)).collect();
        let silent = |since: Option<Instant>, outstanding: u64, reported: u64| {
            if outstanding == 0 || reported > 0 {
                None
            } else {
                Some(since.unwrap_or(now))
            }
        };
        self.silent_since = PerPlatform::from_fn(|p| silent(self.silent_since[p], outstanding[p], delta[p]));
        self.samples.push_back((now, delta));
        while let Some((at, _)) = self.samples.front() {
            let too_old = now.saturating_duration_since(*at) > self.window;
            if too_old || self.samples.len() > MOST_SAMPLES {
                self.samples.pop_front();
            } else {
                break;
            }
        }
        let current = self.window_rate();
        let remembered = self.decayed_peak(now);
        if current.total() >= remembered.total() {
            self.peak = Some((now, current));
        }
    }

    /// Tokens per second per platform: the rate over the window, or the
    /// decaying peak when that is higher.
    pub fn rate(&self, now: Instant) -> PerPlatform<f64> {
        let current = self.window_rate();
        let peak = self.decayed_peak(now);
        current.zip_with(peak, f64::max)
    }

    /// The platforms that have had work outstanding and reported nothing
    /// for [`STALL_AFTER`].
    pub fn stalled(&self, now: Instant) -> PerPlatform<bool> {
        self.silent_since
            .map(|since| since.is_some_and(|since| now.saturating_duration_since(since) >= STALL_AFTER))
    }

    fn window_rate(&self) -> PerPlatform<f64> {
        let (Some((first, _)), Some((last, _))) = (self.samples.front(), self.samples.back()) else {
            return PerPlatform::default();
        };
        let span = last.saturating_duration_since(*first);
        if span < SHORTEST_SPAN {
            return PerPlatform::default();
        }
        // The first sample's tokens were reported before the window began.
        let tokens = self
            .samples
            .iter()
            .skip(1)
            .fold(PerPlatform::<u64>::default(), |sum, (_, d)| sum + *d);
        let seconds = span.as_secs_f64();
        tokens.map(|t| t as f64 / seconds)
    }

    fn decayed_peak(&self, now: Instant) -> PerPlatform<f64> {
        let Some((at, peak)) = self.peak else {
            return PerPlatform::default();
        };
        let halvings = now.saturating_duration_since(at).as_secs_f64() / PEAK_HALF_LIFE.as_secs_f64();
        let factor = 0.5f64.powf(halvings);
        peak.map(|rate| rate * factor)
    }
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
    use crate::store::lanes::Lane;
    use chrono::Utc;

    fn reported(id: u128, ios: u64, android: u64) -> InFlight {
        InFlight {
            id: Uuid::from_u128(id),
            lane: Lane::Standard,
            sent_at: Utc::now(),
            jobs_planned: 1,
            jobs_released: 1,
            jobs_waiting: 0,
            jobs_reported: 1,
            audience_estimate: None,
            harvested: PerPlatform::default(),
            reported: both(ios, android),
        }
    }

    #[test]
    fn the_rate_is_the_growth_of_the_reports_over_the_window() {
        let start = Instant::now();
        let mut meter = RateMeter::new(Duration::from_secs(3));
        for step in 0..=10u64 {
            let now = start + Duration::from_millis(100 * step);
            meter.observe(
                now,
                &[reported(1, 4_000 * step, 2_000 * step), reported(2, 500, 0)],
                PerPlatform::default(),
            );
        }
        let rate = meter.rate(start + Duration::from_secs(1));
        assert!((rate[Platform::Ios] - 40_000.0).abs() < 1.0, "{rate:?}");
        assert!((rate[Platform::Android] - 20_000.0).abs() < 1.0, "{rate:?}");
    }

    #[test]
    fn a_notification_that_leaves_or_arrives_adds_nothing_by_itself() {
        let start = Instant::now();
        let mut meter = RateMeter::new(Duration::from_secs(3));
        meter.observe(start, &[reported(1, 1_000_000, 0)], PerPlatform::default());
        meter.observe(
            start + Duration::from_secs(1),
            &[reported(2, 5_000_000, 0)],
            PerPlatform::default(),
        );
        assert_eq!(meter.rate(start + Duration::from_secs(1))[Platform::Ios], 0.0);
    }

    #[test]
    fn the_peak_is_remembered_and_decays() {
        let start = Instant::now();
        let mut meter = RateMeter::new(Duration::from_secs(1));
        for step in 0..=10u64 {
            meter.observe(
                start + Duration::from_millis(100 * step),
                &[reported(1, 10_000 * step, 0)],
                PerPlatform::default(),
            );
        }
        // Idle for a minute: the window is empty, the peak has halved.
        let later = start + Duration::from_secs(61);
        meter.observe(later, &[], PerPlatform::default());
        let rate = meter.rate(later);
        assert!((rate[Platform::Ios] - 50_000.0).abs() < 1_000.0, "{rate:?}");
    }

    #[test]
    fn a_platform_with_work_and_no_reports_stalls() {
        let start = Instant::now();
        let mut meter = RateMeter::new(Duration::from_secs(3));
        let outstanding = both(10_000, 10_000);
        let at = |s: u64| start + Duration::from_secs(s);
        for s in 0..=STALL_AFTER.as_secs() {
            // Android reports every second, iOS never does.
            meter.observe(at(s), &[reported(1, 0, 1_000 * s)], outstanding);
        }
        let stalled = meter.stalled(at(STALL_AFTER.as_secs()));
        assert_eq!(
            (stalled[Platform::Ios], stalled[Platform::Android]),
            (true, false)
        );
        // One report and it counts as moving again; an empty queue never stalls.
        meter.observe(at(11), &[reported(1, 1, 11_000)], outstanding);
        assert!(!meter.stalled(at(11))[Platform::Ios]);
        meter.observe(at(30), &[reported(1, 1, 11_000)], PerPlatform::default());
        assert_eq!(meter.stalled(at(30)), PerPlatform::default());
    }
}
