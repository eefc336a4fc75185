//! Release: the job relay ([`relay`]) publishes the shard jobs committed
//! to the outbox — which ones next, and how much work may be released
//! ahead of delivery.
//!
//! Every stage after the relay is a FIFO queue (`harvest.jobs`,
//! `deliver.<platform>`), so the order in which jobs are *published* is the
//! order in which devices are reached. The relay therefore keeps the queues
//! shallow — it releases jobs only while the tokens released and not yet
//! reported stay within [`Budget`], a few seconds of the delivery rate it
//! measures ([`rate::RateMeter`]) — and picks each job by [`order::next_release`]:
//! the most urgent lane first, then the notification with the smallest
//! remaining audience.

pub mod order;
pub mod rate;
pub mod relay;

pub use crate::store::outbox::InFlight;
pub use clarion_proto::PerPlatform;
pub use order::{Release, Room, next_release, total_outstanding};
pub use rate::RateMeter;

use std::time::Duration;

/// How much work may be released ahead of delivery, per platform.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Seconds of delivery at the measured rate kept in the queues.
    pub ahead: Duration,
    /// Tokens per platform allowed ahead whatever the rate (an idle
    /// cluster has no rate yet; a send must not start slowly).
    pub min_tokens: u64,
}

impl Budget {
    /// Tokens that may be outstanding on each platform when the dispatchers
    /// of each report `rate` tokens per second.
    pub fn tokens(&self, rate: PerPlatform<f64>) -> PerPlatform<u64> {
        let ahead = self.ahead.as_secs_f64();
        rate.map(|per_s| ((per_s.max(0.0) * ahead) as u64).max(self.min_tokens))
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

    #[test]
    fn the_budget_follows_the_rate_above_its_floor() {
        let budget = Budget {
            ahead: Duration::from_millis(1500),
            min_tokens: 20_000,
        };
        let tokens = budget.tokens(both(40_000.0, 0.0));
        assert_eq!(tokens[Platform::Ios], 60_000);
        assert_eq!(tokens[Platform::Android], 20_000);
        let nonsense = budget.tokens(both(f64::NAN, -5.0));
        assert_eq!(nonsense[Platform::Ios], 20_000);
        assert_eq!(nonsense[Platform::Android], 20_000);
    }
}
