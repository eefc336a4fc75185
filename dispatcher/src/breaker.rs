//! The circuit breaker: stops a misconfigured segment early. Which failure
//! reasons point at the configuration is each channel's word
//! ([`crate::channel::PushChannel::MISCONFIGURED`]).
//!
//! For each (notification, segment) this process watches the first
//! `CLARION_DISPATCH_BREAKER_PUSHES` pushes. If every one of them was
//! answered gone, invalid, or in a way that points at Clarion's own
//! configuration (an endpoint that is not the provider, a refused key, a
//! wrong topic), the breaker opens: the segment's remaining batches are held
//! back — counted, not pushed — so one misconfiguration does not burn
//! through the audience, and the coordinator's safety valve treats the
//! segment as suspect (nothing of it is deleted). One good answer among the
//! first pushes closes the question for good.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use clarion_proto::DeliveryCounts;
use uuid::Uuid;

/// Segments watched at once: far more than a process has notifications
/// in flight; the oldest are forgotten first.
const WATCHED: usize = 1024;

type Key = (Uuid, &'static str);

#[derive(Debug, Clone, Copy, Default)]
struct Watch {
    seen: u64,
    bad: u64,
    /// `Some(true)`: open (held back); `Some(false)`: judged healthy.
    open: Option<bool>,
}

pub struct Breaker {
    first: u64,
    /// Failure reasons that point at the configuration, not at the
    /// provider being busy or down (those are retried, and judged by
    /// nobody here).
    misconfigured: &'static [&'static str],
    watched: Mutex<(HashMap<Key, Watch>, VecDeque<Key>)>,
}

impl Breaker {
    /// Judges each segment on its first `first` pushes, failures for one
    /// of the `misconfigured` reasons counting as bad; 0 never opens.
    pub fn new(first: u32, misconfigured: &'static [&'static str]) -> Self {
        Self {
            first: u64::from(first),
            misconfigured,
            watched: Mutex::default(),
        }
    }

    /// Whether the segment's batches are held back.
    pub fn is_open(&self, notification: Uuid, segment: &'static str) -> bool {
        let watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        watched
            .0
            .get(&(notification, segment))
            .is_some_and(|watch| watch.open == Some(true))
    }

    /// Counts a delivered batch; true when it opened the breaker now.
    pub fn observe(
        &self,
        notification: Uuid,
        segment: &'static str,
        counts: &DeliveryCounts,
        failures: impl IntoIterator<Item = (&'static str, u32)>,
    ) -> bool {
        if self.first == 0 {
            return false;
        }
        let attempted = u64::from(counts.sent)
            + u64::from(counts.failed)
            + u64::from(counts.invalid)
            + u64::from(counts.unregistered);
        let misconfigured: u64 = failures
            .into_iter()
            .filter(|(reason, _)| self.misconfigured.contains(reason))
            .map(|(_, count)| u64::from(count))
            .sum();
        let bad = u64::from(counts.invalid) + u64::from(counts.unregistered) + misconfigured;
        let key = (notification, segment);
        let mut guard = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        let (map, order) = &mut *guard;
        let watch = map.entry(key).or_insert_with(|| {
            order.push_back(key);
            Watch::default()
        });
        if watch.open.is_some() {
            return false;
        }
        watch.seen += attempted;
        watch.bad += bad;
        let opened = if watch.bad < watch.seen {
            watch.open = Some(false);
            false
        } else if watch.seen >= self.first {
            watch.open = Some(true);
            true
        } else {
            false
        };
        if order.len() > WATCHED
            && let Some(oldest) = order.pop_front()
        {
            map.remove(&oldest);
        }
        opened
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A channel's label for an answer pointing at the configuration.
    const WRONG_ENDPOINT: &str = "WrongEndpoint";
    const MISCONFIGURED: &[&str] = &[WRONG_ENDPOINT];

    fn counts(sent: u32, unregistered: u32) -> DeliveryCounts {
        DeliveryCounts {
            sent,
            unregistered,
            ..DeliveryCounts::default()
        }
    }

    #[test]
    fn opens_only_when_every_one_of_the_first_pushes_was_bad() {
        let breaker = Breaker::new(20, MISCONFIGURED);
        let id = Uuid::from_u128(1);
        assert!(!breaker.observe(id, "ios/production", &counts(0, 10), []));
        assert!(!breaker.is_open(id, "ios/production"), "not judged yet");
        assert!(breaker.observe(id, "ios/production", &counts(0, 10), []));
        assert!(breaker.is_open(id, "ios/production"));
        assert!(!breaker.is_open(id, "android"), "per segment");

        let healthy = Uuid::from_u128(2);
        breaker.observe(healthy, "android", &counts(1, 9), []);
        breaker.observe(healthy, "android", &counts(0, 30), []);
        assert!(!breaker.is_open(healthy, "android"), "one good answer settles it");

        let misrouted = Uuid::from_u128(3);
        let failed = DeliveryCounts {
            failed: 25,
            ..DeliveryCounts::default()
        };
        assert!(breaker.observe(misrouted, "android", &failed, [(WRONG_ENDPOINT, 25)]));
        let outage = Uuid::from_u128(4);
        breaker.observe(outage, "android", &failed, [("UNAVAILABLE", 25)]);
        assert!(
            !breaker.is_open(outage, "android"),
            "an outage is retried, not judged"
        );
    }

    #[test]
    fn zero_never_opens() {
        let breaker = Breaker::new(0, MISCONFIGURED);
        let id = Uuid::from_u128(1);
        assert!(!breaker.observe(id, "android", &counts(0, 1_000), []));
        assert!(!breaker.is_open(id, "android"));
    }
}
