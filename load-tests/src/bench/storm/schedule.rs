//! How a load paces its requests: closed loop (each connection sends its
//! next request as soon as the last one is answered: the most the server
//! gives) or open loop at a target rate (request `i` is due `i / rate`
//! seconds after the start, whether or not the server keeps up, as wrk2
//! does), and the bounds on both: no loop runs past its count or its time.

use std::time::Duration;

/// Requests a closed loop may send per second of its phase at most: a
/// count bound far above anything one coordinator serves (the `/healthz`
/// ceiling is ~90,000/s on two cores).
pub const CLOSED_LOOP_MAX_PER_S: u64 = 1_000_000;

/// How a load paces its requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// As fast as the connections are answered.
    ClosedLoop,
    /// `per_s` requests a second, due at fixed times.
    OpenLoop { per_s: f64 },
}

impl Pace {
    /// The most requests a phase of `length` may send.
    pub fn max_requests(self, length: Duration) -> u64 {
        let seconds = length.as_secs_f64();
        match self {
            Pace::ClosedLoop => (CLOSED_LOOP_MAX_PER_S as f64 * seconds).ceil() as u64,
            Pace::OpenLoop { per_s } => (per_s.max(0.0) * seconds).ceil() as u64,
        }
    }

    /// When request `slot` is due, after the phase's start: `None` in a
    /// closed loop (at once).
    pub fn due(self, slot: u64) -> Option<Duration> {
        match self {
            Pace::ClosedLoop => None,
            Pace::OpenLoop { per_s } if per_s > 0.0 => Some(Duration::from_secs_f64(slot as f64 / per_s)),
            Pace::OpenLoop { .. } => Some(Duration::MAX),
        }
    }

    /// The target rate, when there is one.
    pub fn target_per_s(self) -> Option<f64> {
        match self {
            Pace::ClosedLoop => None,
            Pace::OpenLoop { per_s } => Some(per_s),
        }
    }
}

/// A deterministic, well-spread index in `0..len` for request `slot`
/// (splitmix64): random reads without a shared random generator.
pub fn spread(slot: u64, len: usize) -> usize {
    let mut z = slot.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % len.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_loop_spaces_its_requests_evenly_and_stops_at_its_count() {
        let pace = Pace::OpenLoop { per_s: 20_000.0 };
        assert_eq!(pace.due(0), Some(Duration::ZERO));
        assert_eq!(pace.due(1), Some(Duration::from_micros(50)));
        assert_eq!(pace.due(20_000), Some(Duration::from_secs(1)));
        // Ten seconds at 20,000/s: 200,000 requests, the last due at 9.99995 s.
        let length = Duration::from_secs(10);
        assert_eq!(pace.max_requests(length), 200_000);
        assert!(
            pace.due(pace.max_requests(length) - 1)
                .is_some_and(|due| due < length)
        );
        // Fractional rates round the count up, never down to nothing.
        assert_eq!(
            Pace::OpenLoop { per_s: 0.5 }.max_requests(Duration::from_secs(1)),
            1
        );
        assert_eq!(Pace::OpenLoop { per_s: 0.0 }.max_requests(length), 0);
        assert_eq!(Pace::OpenLoop { per_s: 0.0 }.due(3), Some(Duration::MAX));
    }

    #[test]
    fn a_closed_loop_sends_at_once_within_its_bound() {
        let pace = Pace::ClosedLoop;
        assert_eq!(pace.due(12), None);
        assert_eq!(pace.max_requests(Duration::from_millis(2500)), 2_500_000);
        assert_eq!(pace.target_per_s(), None);
    }

    #[test]
    fn spread_covers_the_range_roughly_evenly() {
        let mut seen = [0u32; 10];
        for slot in 0..100_000 {
            seen[spread(slot, 10)] += 1;
        }
        assert!(seen.iter().all(|n| (9_000..11_000).contains(n)), "{seen:?}");
        assert_eq!(spread(7, 0), 0);
    }
}
