//! What the phones behind a mock did with the pushes it accepted, counted
//! as it happens and read as a [`ReceiptStats`] snapshot (in the mock's
//! `GET /stats`, and by tests, the demo and the benchmark).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::queue::Event;

/// The phones' counts: every accepted push ends in exactly one of
/// `silent`, `dropped` or a `received` receipt that is pending, in flight,
/// posted, rejected or failed; an open likewise once its receipt was taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptStats {
    /// Pushes whose phone reports (receipts of both kinds scheduled).
    pub scheduled: u64,
    /// Pushes whose phone never reports (offline, or later than the cut-off).
    pub silent: u64,
    /// Receipts not kept because the pending queue was full.
    pub dropped: u64,
    /// Receipts waiting for their time.
    pub pending: u64,
    /// Receipts in requests not answered yet (retries included).
    pub in_flight: u64,
    /// `received` receipts the server acknowledged (2xx).
    pub received: u64,
    /// `opened` receipts the server acknowledged.
    pub opened: u64,
    /// Receipts refused with a 4xx other than 429 (not retried).
    pub rejected: u64,
    /// Receipts given up after the last try (timeouts, 5xx, 429, 503).
    pub failed: u64,
    /// Requests sent, retries included, and retries alone.
    pub requests: u64,
    pub retries: u64,
    /// The server's own counts from its 202 answers.
    pub server_accepted: u64,
    pub server_duplicates: u64,
    pub server_ignored: u64,
}

impl ReceiptStats {
    /// Nothing left to send: every receipt was posted, refused, dropped or
    /// given up.
    pub fn settled(&self) -> bool {
        self.pending == 0 && self.in_flight == 0
    }
}

/// The running counts (`pending` is the queue's length, read beside them).
#[derive(Default)]
pub struct Counters {
    scheduled: AtomicU64,
    silent: AtomicU64,
    dropped: AtomicU64,
    in_flight: AtomicU64,
    received: AtomicU64,
    opened: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    requests: AtomicU64,
    retries: AtomicU64,
    server_accepted: AtomicU64,
    server_duplicates: AtomicU64,
    server_ignored: AtomicU64,
}

fn add(counter: &AtomicU64, n: usize) {
    counter.fetch_add(n as u64, Ordering::Relaxed);
}

impl Counters {
    pub fn scheduled(&self) {
        add(&self.scheduled, 1);
    }

    pub fn silent(&self) {
        add(&self.silent, 1);
    }

    pub fn dropped(&self) {
        add(&self.dropped, 1);
    }

    pub fn sending(&self, receipts: usize) {
        add(&self.in_flight, receipts);
    }

    pub fn request(&self, retry: bool) {
        add(&self.requests, 1);
        if retry {
            add(&self.retries, 1);
        }
    }

    /// A batch the server acknowledged, with its own counts when it said them.
    pub fn posted(&self, events: &[Event], answer: Option<ServerCounts>) {
        let opened = events.iter().filter(|e| **e == Event::Opened).count();
        add(&self.received, events.len() - opened);
        add(&self.opened, opened);
        if let Some(answer) = answer {
            self.server_accepted.fetch_add(answer.accepted, Ordering::Relaxed);
            self.server_duplicates
                .fetch_add(answer.duplicates, Ordering::Relaxed);
            self.server_ignored.fetch_add(answer.ignored, Ordering::Relaxed);
        }
        self.done(events.len());
    }

    pub fn rejected(&self, receipts: usize) {
        add(&self.rejected, receipts);
        self.done(receipts);
    }

    pub fn failed(&self, receipts: usize) {
        add(&self.failed, receipts);
        self.done(receipts);
    }

    fn done(&self, receipts: usize) {
        self.in_flight.fetch_sub(receipts as u64, Ordering::Relaxed);
    }

    pub fn snapshot(&self, pending: usize) -> ReceiptStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ReceiptStats {
            scheduled: read(&self.scheduled),
            silent: read(&self.silent),
            dropped: read(&self.dropped),
            pending: pending as u64,
            in_flight: read(&self.in_flight),
            received: read(&self.received),
            opened: read(&self.opened),
            rejected: read(&self.rejected),
            failed: read(&self.failed),
            requests: read(&self.requests),
            retries: read(&self.retries),
            server_accepted: read(&self.server_accepted),
            server_duplicates: read(&self.server_duplicates),
            server_ignored: read(&self.server_ignored),
        }
    }

    /// Zero again; receipts in flight keep being counted as they end.
    pub fn reset(&self) {
        for counter in [
            &self.scheduled,
            &self.silent,
            &self.dropped,
            &self.received,
            &self.opened,
            &self.rejected,
            &self.failed,
            &self.requests,
            &self.retries,
            &self.server_accepted,
            &self.server_duplicates,
            &self.server_ignored,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

/// The receipts API's answer: `{"accepted", "duplicates", "ignored"}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct ServerCounts {
    #[serde(default)]
    pub accepted: u64,
    #[serde(default)]
    pub duplicates: u64,
    #[serde(default)]
    pub ignored: u64,
}
