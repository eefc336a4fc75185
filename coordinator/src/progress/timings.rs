//! Timings of a notification: how long until half, 90% and 99% of its
//! reachable audience was accepted by Apple / Google, and whether it met
//! the 90in2 bar.

use chrono::{DateTime, Utc};
use tokio_postgres::GenericClient;
use uuid::Uuid;

use crate::store::StoreError;
use crate::store::delivery::accept_histogram;

/// The 90in2 bar: 90% of the reachable audience within two minutes.
pub const NINETY_IN_TWO_MS: u32 = 120_000;

/// Time from the send request until half, 90% and 99% of the reachable
/// audience (less the devices reported gone) was accepted by Apple / Google;
/// `None` while (or if never) reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    pub t50_ms: Option<u32>,
    pub t90_ms: Option<u32>,
    pub t99_ms: Option<u32>,
}

impl Timings {
    pub fn as_array(self) -> [Option<u32>; 3] {
        [self.t50_ms, self.t90_ms, self.t99_ms]
    }

    /// Met 90in2: `Some(true)` once t90 is within the bar, `Some(false)`
    /// once that can no longer happen (two minutes passed, or the
    /// notification is complete without reaching 90%), `None` while open.
    pub fn ninety_in_two(self, sent_at: DateTime<Utc>, completed: bool) -> Option<bool> {
        let two_minutes_over =
            Utc::now() - sent_at > chrono::Duration::milliseconds(i64::from(NINETY_IN_TWO_MS));
        match self.t90_ms {
            Some(t90) => Some(t90 <= NINETY_IN_TWO_MS),
            None if two_minutes_over || completed => Some(false),
            None => None,
        }
    }
}

/// The devices timings count against: the audience less those reported
/// gone (an uninstalled app cannot be reached by anyone).
pub fn reachable(audience: u64, unregistered: u64) -> u64 {
    audience.saturating_sub(unregistered)
}

/// The timings so far, from the accept-time histogram.
pub async fn timings(client: &impl GenericClient, id: Uuid, reachable: u64) -> Result<Timings, StoreError> {
    Ok(percentiles(&accept_histogram(client, id).await?, reachable))
}

/// The end of the first bucket by which each share of the audience was accepted.
pub fn percentiles(buckets: &[(u32, u64)], audience: u64) -> Timings {
    let at = |q: f64| -> Option<u32> {
        if audience == 0 {
            return None;
        }
        let needed = (q * audience as f64).ceil() as u64;
        let mut accepted = 0;
        buckets.iter().find_map(|(after_ms, count)| {
            accepted += count;
            (accepted >= needed).then_some(after_ms + clarion_proto::ACCEPT_BUCKET_MS)
        })
    };
    Timings {
        t50_ms: at(0.5),
        t90_ms: at(0.9),
        t99_ms: at(0.99),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_bucket_ends_reached_by_that_share() {
        let buckets = [(0, 40), (10, 40), (500, 15), (1000, 4)];
        let t = percentiles(&buckets, 100);
        assert_eq!(
            t,
            Timings {
                t50_ms: Some(20),
                t90_ms: Some(510),
                t99_ms: Some(1010)
            }
        );
        // 99 of 100 accepted: t99 reached, nothing beyond.
        let t = percentiles(&buckets, 101);
        assert_eq!(t.t99_ms, None);
        assert_eq!(percentiles(&[], 0), Timings::default());
    }

    #[test]
    fn ninety_in_two_is_open_until_reached_or_impossible() {
        let now = Utc::now();
        let reached = |ms| Timings {
            t90_ms: Some(ms),
            ..Timings::default()
        };
        assert_eq!(reached(119_990).ninety_in_two(now, false), Some(true));
        assert_eq!(reached(120_010).ninety_in_two(now, true), Some(false));
        assert_eq!(Timings::default().ninety_in_two(now, false), None);
        assert_eq!(Timings::default().ninety_in_two(now, true), Some(false));
        let long_ago = now - chrono::Duration::seconds(121);
        assert_eq!(Timings::default().ninety_in_two(long_ago, false), Some(false));
    }
}
