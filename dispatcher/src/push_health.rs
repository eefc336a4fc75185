//! Whether this dispatcher can still push: `/readyz` turns 503 once pushes
//! have kept failing — connection errors, timeouts, 429, 5xx — for longer
//! than `CLARION_DISPATCH_NOT_READY_AFTER_SECS` with none succeeding, and
//! turns ready again with the next push that succeeds.
//!
//! A provider's answer about the device (accepted, unregistered, invalid)
//! or a refusal for good (a bad payload) shows the provider is reachable;
//! only answers worth a retry count as failing. The failures must go on:
//! once none has been seen for the bound either (nothing was sent), the
//! check has no evidence left and says ready.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clarion_runtime::health::ReadinessCheck;

/// "No failure since the last success".
const NONE: u64 = u64::MAX;

/// Tracks pushes that failed since the last one that got through.
pub struct PushHealth {
    bound: Duration,
    base: Instant,
    /// Milliseconds after `base` of the first failure since the last
    /// success, or [`NONE`].
    failing_since_ms: AtomicU64,
    last_failure_ms: AtomicU64,
    failures: AtomicU64,
    /// The fixed label of the latest failure.
    last_reason: Mutex<&'static str>,
}

impl PushHealth {
    pub fn new(bound: Duration) -> Self {
        Self {
            bound,
            base: Instant::now(),
            failing_since_ms: AtomicU64::new(NONE),
            last_failure_ms: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            last_reason: Mutex::new("unknown"),
        }
    }

    /// A push got an answer from the provider: it is reachable. Called
    /// for every push, so it only reads unless something was failing.
    pub fn succeeded(&self) {
        if self.failing_since_ms.load(Ordering::Relaxed) != NONE {
            self.failing_since_ms.store(NONE, Ordering::Relaxed);
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// A push attempt failed for `reason` (a fixed label).
    pub fn failed(&self, reason: &'static str) {
        let now = self.now_ms();
        let _ = self
            .failing_since_ms
            .compare_exchange(NONE, now, Ordering::Relaxed, Ordering::Relaxed);
        self.last_failure_ms.fetch_max(now, Ordering::Relaxed);
        self.failures.fetch_add(1, Ordering::Relaxed);
        *self.last_reason.lock().unwrap_or_else(|p| p.into_inner()) = reason;
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(NONE - 1)
    }
}

impl ReadinessCheck for PushHealth {
    fn name(&self) -> &'static str {
        "push"
    }

    fn check(&self) -> Result<(), (&'static str, String)> {
        let since = self.failing_since_ms.load(Ordering::Relaxed);
        if since == NONE {
            return Ok(());
        }
        let now = self.now_ms();
        let bound = u64::try_from(self.bound.as_millis()).unwrap_or(u64::MAX);
        let failing_for = now.saturating_sub(since);
        let quiet_for = now.saturating_sub(self.last_failure_ms.load(Ordering::Relaxed));
        if failing_for < bound || quiet_for >= bound {
            return Ok(());
        }
        let reason = *self.last_reason.lock().unwrap_or_else(|p| p.into_inner());
        Err((
            "failing",
            format!(
                "no push has succeeded for {} s; {} attempts failed meanwhile, the last one: {reason}",
                failing_for / 1000,
                self.failures.load(Ordering::Relaxed),
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health_failing_for(bound_ms: u64, since_ms: u64, last_ms: u64) -> PushHealth {
        let health = PushHealth {
            // An hour old, so failures can be backdated.
            base: Instant::now() - Duration::from_secs(3600),
            ..PushHealth::new(Duration::from_millis(bound_ms))
        };
        health.failed("timeout");
        // Backdate the failures instead of waiting.
        let now = health.now_ms();
        health
            .failing_since_ms
            .store(now.saturating_sub(since_ms), Ordering::Relaxed);
        health
            .last_failure_ms
            .store(now.saturating_sub(last_ms), Ordering::Relaxed);
        health
    }

    #[test]
    fn ready_until_failures_outlast_the_bound_and_again_after_a_success() {
        let health = PushHealth::new(Duration::from_secs(60));
        assert!(health.check().is_ok());
        health.failed("connect");
        assert!(health.check().is_ok(), "one failure is not an outage");

        let health = health_failing_for(60_000, 61_000, 1_000);
        let (status, reason) = health.check().expect_err("failing for over a minute");
        assert_eq!(status, "failing");
        assert!(reason.contains("timeout"), "{reason}");
        health.succeeded();
        assert!(health.check().is_ok(), "a success makes it ready again");
    }

    #[test]
    fn old_failures_with_nothing_sent_since_are_no_evidence() {
        let health = health_failing_for(60_000, 300_000, 120_000);
        assert!(health.check().is_ok());
    }
}
