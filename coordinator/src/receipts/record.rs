//! Recording one request's receipts in one transaction: which count,
//! which are duplicates, which are ignored, and what they add to each
//! notification's aggregates. The answer is given only after the commit.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Duration, Utc};
use tokio_postgres::Transaction;
use uuid::Uuid;

use super::bins::{TWO_MINUTES_MS, bin_of};
use super::body::{Event, Receipt};
use super::store::{self, Increments, Target};
use crate::store::StoreError;

/// Counter rows per notification: concurrent requests for one notification
/// spread their counter updates over this many rows (one lock each).
pub const SLOTS: i16 = 16;

/// What became of a request's receipts.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outcome {
    pub accepted: u64,
    pub duplicates: u64,
    pub ignored: u64,
    /// Per event (`Event::ALL` order): accepted, duplicates, ignored.
    pub by_event: [[u64; 3]; 2],
    /// Seconds from the send of each newly counted receipt, per event.
    pub delays: Vec<(Event, f64)>,
}

impl Outcome {
    fn tally(&mut self, event: Event, column: usize) {
        let row = match event {
            Event::Received => 0,
            Event::Opened => 1,
        };
        self.by_event[row][column] += 1;
        match column {
            0 => self.accepted += 1,
            1 => self.duplicates += 1,
            _ => self.ignored += 1,
        }
    }
}

/// `at` (the arrival time when the device gave none) within
/// [`sent_at`, `now`]: phone clocks are wrong both ways.
pub fn clamp(at: Option<DateTime<Utc>>, sent_at: DateTime<Utc>, now: DateTime<Utc>) -> DateTime<Utc> {
    let at = at.unwrap_or(now);
    if now < sent_at {
        return sent_at;
    }
    at.clamp(sent_at, now)
}

/// Records `receipts` arrived at `now`; `cutoff` is the detail retention's
/// (receipts of notifications sent before it are ignored), `may_use_app`
/// says whether the caller's key may speak for a notification's app (the
/// receipts of other apps are ignored). Commits nothing: the caller commits
/// `tx`.
pub async fn record(
    tx: &Transaction<'_>,
    receipts: &[Receipt],
    now: DateTime<Utc>,
    cutoff: Option<DateTime<Utc>>,
    slot: i16,
    may_use_app: &(dyn Fn(&str) -> bool + Sync),
) -> Result<Outcome, StoreError> {
    let mut by_notification: BTreeMap<Uuid, Vec<&Receipt>> = BTreeMap::new();
    for receipt in receipts {
        by_notification
            .entry(receipt.notification_id)
            .or_default()
            .push(receipt);
    }
    let ids: Vec<Uuid> = by_notification.keys().copied().collect();
    let targets = store::targets(tx, &ids, cutoff).await?;
    let mut outcome = Outcome::default();
    // In id order, so concurrent requests lock aggregate rows in one order.
    for (id, receipts) in by_notification {
        match targets.get(&id).filter(|target| may_use_app(&target.app)) {
            Some(target) => record_for(tx, target, &receipts, now, slot, &mut outcome).await?,
            None => receipts.iter().for_each(|r| outcome.tally(r.event, 2)),
        }
    }
    Ok(outcome)
}

async fn record_for(
    tx: &Transaction<'_>,
    target: &Target,
    receipts: &[&Receipt],
    now: DateTime<Utc>,
    slot: i16,
    outcome: &mut Outcome,
) -> Result<(), StoreError> {
    let tokens: Vec<String> = receipts
        .iter()
        .map(|r| r.token.clone())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let reporting = store::reporting_among(tx, target, &tokens).await?;
    // The first receipt of each (device, event) in the request; the rest
    // of them are duplicates. Sorted by token: one lock order.
    let mut received: BTreeMap<&str, DateTime<Utc>> = BTreeMap::new();
    let mut opened: BTreeMap<&str, DateTime<Utc>> = BTreeMap::new();
    let mut verdicts: Vec<(Event, &str, bool)> = Vec::with_capacity(receipts.len());
    for receipt in receipts {
        if !reporting.contains(&receipt.token) {
            outcome.tally(receipt.event, 2);
            continue;
        }
        let firsts = match receipt.event {
            Event::Received => &mut received,
            Event::Opened => &mut opened,
        };
        let first = !firsts.contains_key(receipt.token.as_str());
        if first {
            firsts.insert(&receipt.token, clamp(receipt.at, target.sent_at, now));
        }
        verdicts.push((receipt.event, &receipt.token, first));
    }
    // An `opened` without a `received` counts as both: the row is inserted
    // with the open's time as its receipt time.
    let mut rows: BTreeMap<&str, DateTime<Utc>> = opened.clone();
    rows.extend(received.iter().map(|(token, at)| (*token, *at)));
    let owned = |rows: &BTreeMap<&str, DateTime<Utc>>| -> Vec<(String, DateTime<Utc>)> {
        rows.iter()
            .map(|(token, at)| ((*token).to_owned(), *at))
            .collect()
    };
    let new_received = if rows.is_empty() {
        HashMap::new()
    } else {
        store::insert_received(tx, target.id, &owned(&rows)).await?
    };
    let new_opened = if opened.is_empty() {
        HashMap::new()
    } else {
        store::mark_opened(tx, target.id, &owned(&opened)).await?
    };
    for (event, token, first) in verdicts {
        let counted = first
            && match event {
                Event::Received => new_received.contains_key(token),
                Event::Opened => new_opened.contains_key(token),
            };
        outcome.tally(event, if counted { 0 } else { 1 });
    }
    let arrived_in_two = (now - target.sent_at) <= Duration::milliseconds(TWO_MINUTES_MS);
    let mut inc = Increments {
        received: new_received.len() as i64,
        opened: new_opened.len() as i64,
        received_in_two: if arrived_in_two {
            new_received.len() as i64
        } else {
            0
        },
        delays: HashMap::new(),
    };
    for (event, times) in [(Event::Received, &new_received), (Event::Opened, &new_opened)] {
        for at in times.values() {
            let delay_ms = (*at - target.sent_at).num_milliseconds();
            *inc.delays.entry((event, bin_of(delay_ms))).or_default() += 1;
            outcome.delays.push((event, delay_ms.max(0) as f64 / 1000.0));
        }
    }
    store::add_aggregates(tx, target.id, slot, &inc).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_clamped_to_the_send_and_the_arrival() {
        let sent = Utc::now() - Duration::seconds(60);
        let now = Utc::now();
        assert_eq!(clamp(None, sent, now), now);
        assert_eq!(clamp(Some(sent - Duration::hours(3)), sent, now), sent);
        assert_eq!(clamp(Some(now + Duration::hours(3)), sent, now), now);
        let between = sent + Duration::seconds(5);
        assert_eq!(clamp(Some(between), sent, now), between);
        // A send "in the future" (clock skew between replicas) is its own floor.
        assert_eq!(
            clamp(None, now + Duration::seconds(1), now),
            now + Duration::seconds(1)
        );
    }
}
