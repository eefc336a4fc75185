//! The phones behind a mock APNs or FCM: for every push the mock accepted,
//! a simulated phone reports it to Clarion's `POST /api/v1/receipts` as an
//! app does — `received` after a delay drawn for it, and `opened` later if
//! its reader opens the alert; some phones never report. Receipts wait in
//! a bounded queue until their time, then go in batches of at most 500,
//! each receipt's `at` the simulated time it happened.
//!
//! The mock's request path only draws the phone's fate and queues a
//! receipt ([`Phones::accepted`]); one task on the mock's runtime sends
//! what is due every `flush_every`, with a bounded number of requests in
//! flight. Dropping [`Phones`] stops it; receipts not sent by then are
//! lost, as a phone's would be.

pub mod config;
mod counters;
mod fate;
mod poster;
mod queue;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use anyhow::{Context, Result};
use chrono::Utc;
use tokio::task::{JoinHandle, JoinSet};
use uuid::Uuid;

pub use config::{DelayDistribution, MAX_BATCH, ReceiptsArgs, ReceiptsConfig};
pub use counters::ReceiptStats;
pub use queue::{Event, Receipt};

use counters::Counters;
use fate::{Fate, Fates};
use queue::{Pending, PendingQueue};

/// The phones of one mock, reporting while this lives.
pub struct Phones {
    shared: Arc<Shared>,
    sender: JoinHandle<()>,
}

struct Shared {
    config: ReceiptsConfig,
    fates: Fates,
    queue: Mutex<PendingQueue>,
    counters: Counters,
}

impl Drop for Phones {
    fn drop(&mut self) {
        self.sender.abort();
    }
}

impl Phones {
    /// Starts reporting; call it on the runtime that should send the
    /// receipts (the mock's own).
    pub fn start(config: ReceiptsConfig) -> Result<Self> {
        config.check()?;
        super::tls::install_crypto_provider();
        let client = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .connect_timeout(config.request_timeout)
            .build()
            .context("building the receipts client")?;
        let shared = Arc::new(Shared::new(config)?);
        let sender = tokio::spawn(send_due(shared.clone(), client));
        Ok(Self { shared, sender })
    }

    /// The mock accepted a push of `notification_id` to `token`: its phone
    /// reports it later, or never.
    pub fn accepted(&self, notification_id: Uuid, token: &str) {
        self.shared.accepted(notification_id, token);
    }

    /// Whether the phone (or browser) behind `token` reports receipts:
    /// every one, or the panel's only.
    pub fn report_for(&self, token: &str) -> bool {
        self.shared.report_for(token)
    }

    pub fn stats(&self) -> ReceiptStats {
        // Read under the queue's lock: a receipt moves from pending to in
        // flight under it, so a snapshot never sees it in neither.
        let queue = self.shared.queue();
        self.shared.counters.snapshot(queue.len())
    }

    /// Forgets the pending receipts and zeroes the counts.
    pub fn reset(&self) {
        let mut queue = self.shared.queue();
        queue.clear();
        self.shared.counters.reset();
    }
}

impl Shared {
    fn new(config: ReceiptsConfig) -> Result<Self> {
        Ok(Self {
            fates: Fates::new(&config)?,
            queue: Mutex::new(PendingQueue::new(config.max_pending)),
            counters: Counters::default(),
            config,
        })
    }

    fn queue(&self) -> MutexGuard<'_, PendingQueue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn report_for(&self, token: &str) -> bool {
        self.config
            .panel_suffix
            .as_ref()
            .is_none_or(|suffix| token.ends_with(suffix.as_str()))
    }

    fn accepted(&self, notification_id: Uuid, token: &str) {
        if !self.report_for(token) {
            return;
        }
        let Fate::Reports {
            received_after,
            opened_after,
        } = self.fates.of(notification_id, token)
        else {
            self.counters.silent();
            return;
        };
        let pending = Pending {
            due: Instant::now() + received_after,
            receipt: Receipt {
                notification_id,
                token: token.into(),
                event: Event::Received,
                at: Utc::now() + received_after,
            },
            opened_after,
        };
        match self.queue().push(pending) {
            Ok(()) => self.counters.scheduled(),
            Err(_) => self.counters.dropped(),
        }
    }

    /// Takes a batch of the receipts due by `now` (marked in flight) and
    /// queues the opens that follow them.
    fn take_batch(&self, now: Instant) -> Vec<Receipt> {
        let mut queue = self.queue();
        let due = queue.take_due(now, self.config.batch_size);
        let mut batch = Vec::with_capacity(due.len());
        for pending in due {
            if let Some(after) = pending.opened_after {
                let opened = Pending {
                    due: pending.due + after,
                    receipt: Receipt {
                        event: Event::Opened,
                        at: pending.receipt.at + after,
                        ..pending.receipt.clone()
                    },
                    opened_after: None,
                };
                if queue.push(opened).is_err() {
                    self.counters.dropped();
                }
            }
            batch.push(pending.receipt);
        }
        self.counters.sending(batch.len());
        batch
    }
}

/// Every `flush_every`, sends what is due in batches, while fewer than
/// `max_in_flight` requests are out; what cannot go yet stays queued.
async fn send_due(shared: Arc<Shared>, client: reqwest::Client) {
    let mut tick = tokio::time::interval(shared.config.flush_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Dropped with this task when the phones stop: aborts the requests.
    let mut in_flight = JoinSet::new();
    loop {
        tick.tick().await;
        while in_flight.try_join_next().is_some() {}
        while in_flight.len() < shared.config.max_in_flight {
            let batch = shared.take_batch(Instant::now());
            if batch.is_empty() {
                break;
            }
            let (shared, client) = (shared.clone(), client.clone());
            in_flight.spawn(async move {
                poster::post(&client, &shared.config, &shared.counters, batch).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn due_receipts_leave_in_batches_of_at_most_500_and_opens_follow() {
        let mut config = ReceiptsConfig::new("http://127.0.0.1:1/", "k");
        config.online_share = 1.0;
        config.open_share = 1.0;
        config.receive_delay.spread = 0.0;
        config.open_delay.spread = 0.0;
        let shared = Shared::new(config).unwrap();
        let id = Uuid::from_u128(9);
        for n in 0..1200 {
            shared.accepted(id, &format!("{n:064x}"));
        }
        let stats = || shared.counters.snapshot(shared.queue().len());
        assert_eq!((stats().scheduled, stats().pending), (1200, 1200));
        assert!(shared.take_batch(Instant::now()).is_empty(), "not due yet");

        // Received after 2 s, opened 20 s later.
        let received_by = Instant::now() + Duration::from_secs(3);
        let sizes: Vec<usize> = (0..4).map(|_| shared.take_batch(received_by).len()).collect();
        assert_eq!(sizes, [500, 500, 200, 0]);
        assert_eq!(
            (stats().in_flight, stats().pending),
            (1200, 1200),
            "the opens wait"
        );
        let opened_by = received_by + Duration::from_secs(20);
        let opened = shared.take_batch(opened_by);
        assert_eq!(opened.len(), 500);
        assert!(opened.iter().all(|r| r.event == Event::Opened));
        shared.counters.posted(&[Event::Received; 3], None);
        assert_eq!((stats().received, stats().in_flight), (3, 1697));
    }
}
