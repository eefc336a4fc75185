//! Per-key send rate limits (`sends_per_minute` in the keys file): a
//! token bucket per key that holds a minute's worth of sends and refills
//! evenly, so a key may send its whole minute's allowance at once and then
//! one more every 60 / rate seconds.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// The send limiter of one key.
pub struct SendLimit {
    rate: u32,
    limiter: DefaultDirectRateLimiter,
    clock: DefaultClock,
}

impl SendLimit {
    /// `rate` sends a minute; `None` for 0.
    pub fn per_minute(rate: u32) -> Option<Self> {
        let quota = Quota::per_minute(NonZeroU32::new(rate)?);
        Some(Self {
            rate,
            limiter: RateLimiter::direct(quota),
            clock: DefaultClock::default(),
        })
    }

    /// The configured rate.
    pub fn per_minute_rate(&self) -> u32 {
        self.rate
    }

    /// Takes one send from the bucket, or says how long until one is free.
    pub fn check(&self) -> Result<(), Duration> {
        self.limiter
            .check()
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minutes_allowance_then_a_wait() {
        let limit = SendLimit::per_minute(2).unwrap();
        assert!(limit.check().is_ok());
        assert!(limit.check().is_ok());
        let wait = limit.check().unwrap_err();
        assert!(
            wait > Duration::from_secs(25) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        assert!(SendLimit::per_minute(0).is_none());
    }
}
