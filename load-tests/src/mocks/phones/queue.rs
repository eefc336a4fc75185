//! The receipts waiting for their time, soonest first, in a bounded heap:
//! a push puts its `received` in; when that is taken to be sent, the
//! reader's `opened` (if any) goes in for later. One entry a phone at a
//! time keeps the memory to one receipt per reporting phone.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Serialize, Serializer};
use uuid::Uuid;

/// `received` or `opened`, as the receipts API spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    Received,
    Opened,
}

/// One receipt, as posted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Receipt {
    pub notification_id: Uuid,
    /// Shared by a phone's `received` and `opened`.
    #[serde(serialize_with = "text")]
    pub token: Arc<str>,
    pub event: Event,
    /// The simulated time the phone got (or opened) the push.
    #[serde(serialize_with = "rfc3339_millis")]
    pub at: DateTime<Utc>,
}

fn text<S: Serializer>(token: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(token)
}

fn rfc3339_millis<S: Serializer>(at: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&at.to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// A receipt waiting for `due`, and the reader's open that follows it.
#[derive(Debug)]
pub struct Pending {
    pub due: Instant,
    pub receipt: Receipt,
    pub opened_after: Option<Duration>,
}

/// Orders by due time, then by arrival (a heap entry needs a total order).
struct Entry {
    due: Instant,
    seq: u64,
    pending: Pending,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// The queue was full; the receipt was not kept.
#[derive(Debug, PartialEq, Eq)]
pub struct Full;

pub struct PendingQueue {
    heap: BinaryHeap<Reverse<Entry>>,
    bound: usize,
    seq: u64,
}

impl PendingQueue {
    pub fn new(bound: usize) -> Self {
        Self {
            heap: BinaryHeap::new(),
            bound,
            seq: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn push(&mut self, pending: Pending) -> Result<(), Full> {
        if self.heap.len() >= self.bound {
            return Err(Full);
        }
        self.seq += 1;
        self.heap.push(Reverse(Entry {
            due: pending.due,
            seq: self.seq,
            pending,
        }));
        Ok(())
    }

    /// Takes up to `max` receipts due by `now`, soonest first.
    pub fn take_due(&mut self, now: Instant, max: usize) -> Vec<Pending> {
        let mut due = Vec::new();
        while due.len() < max {
            match self.heap.peek() {
                Some(Reverse(entry)) if entry.due <= now => {}
                _ => break,
            }
            if let Some(Reverse(entry)) = self.heap.pop() {
                due.push(entry.pending);
            }
        }
        due
    }

    pub fn clear(&mut self) {
        self.heap.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(due: Instant, token: &str) -> Pending {
        Pending {
            due,
            receipt: Receipt {
                notification_id: Uuid::nil(),
                token: token.into(),
                event: Event::Received,
                at: DateTime::from_timestamp(1_800_000_000, 123_456_789).unwrap(),
            },
            opened_after: None,
        }
    }

    #[test]
    fn due_receipts_come_out_soonest_first_and_the_bound_holds() {
        let now = Instant::now();
        let mut queue = PendingQueue::new(3);
        queue.push(pending(now + Duration::from_secs(2), "late")).unwrap();
        queue.push(pending(now, "first")).unwrap();
        queue.push(pending(now, "second")).unwrap();
        assert_eq!(queue.push(pending(now, "fourth")), Err(Full));
        let taken: Vec<_> = queue
            .take_due(now, 10)
            .into_iter()
            .map(|p| p.receipt.token.to_string())
            .collect();
        assert_eq!(taken, ["first", "second"]);
        assert_eq!(queue.len(), 1);
        assert!(queue.take_due(now, 10).is_empty());
        assert_eq!(queue.take_due(now + Duration::from_secs(2), 0).len(), 0);
        assert_eq!(queue.take_due(now + Duration::from_secs(2), 1).len(), 1);
        assert_eq!(queue.len(), 0);
    }

    #[test]
    fn a_receipt_is_written_as_the_api_reads_it() {
        let receipt = pending(Instant::now(), "abc").receipt;
        assert_eq!(
            serde_json::to_value(&receipt).unwrap(),
            serde_json::json!({"notification_id": "00000000-0000-0000-0000-000000000000",
                               "token": "abc", "event": "received", "at": "2027-01-15T08:00:00.123Z"})
        );
    }
}
