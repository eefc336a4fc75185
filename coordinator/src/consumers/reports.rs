//! The reports queue: job reports from harvesters and delivery reports from
//! dispatchers, each counted into its notification's progress exactly once.
//!
//! Delivery reports (one per token batch: thousands a second in a big send)
//! go to a [`ReportWriter`] that counts every report waiting in one
//! transaction and acks each only after that transaction commits. When the
//! writer was idle, reports gather for `GATHER_FOR` after the first one
//! (or until the consumer's prefetch is all in hand), so a send's steady
//! trickle of reports — a few dozen a second — costs a few commits a
//! second, not one each; after a write that took longer, what queued
//! meanwhile is written at once.
//! Channel reports (Live Activities) are recorded one by one
//! ([`crate::live_activity::report`]), acked after their commit.
//! Job reports (one per shard job) are counted one by one as they come. A
//! delivery report no dispatcher would send is parked in the dead-letter
//! queue at once, which fails its notification.

use std::time::Duration;

use clarion_proto::codec::decode;
use clarion_proto::names::{headers, message_types};
use clarion_proto::{DeliveryReport, JobReport};
use clarion_runtime::PgPool;
use clarion_runtime::amqp::consumer::{DeliveryHandler, ack, dead_letter, requeue};
use clarion_runtime::amqp::message::header_text;
use futures::future::LocalBoxFuture;
use lapin::message::Delivery;
use tokio::sync::mpsc;
use tracing::{Instrument, debug, error, info, warn};
use uuid::Uuid;

use super::{count_report, give_back, process_span, retry_database};
use actix::Addr;
use clarion_proto::live_activity::{ChannelOutcome, ChannelReport};

use crate::live_activity::relay::{CommandRelay, CommandsCommitted};
use crate::live_activity::report::{self as live_report, Fate};
use crate::metrics;
use crate::progress::completion::{Valve, announce};
use crate::progress::{Recorded, record_deliveries, record_delivery, record_job};
use crate::release::relay::JobRelay;
use crate::send::accept::{Sending, committed};
use crate::send::topic_counter::TopicCounter;
use crate::store::StoreError;

/// Most delivery reports counted in one transaction. The consumer's
/// prefetch bounds it too: reports are acked only once written.
const MAX_REPORTS_PER_WRITE: usize = 512;
/// How long an idle writer lets reports gather after the first: the most a
/// report's count (and its ack) waits for company. Progress is read every
/// second at most, so a tenth of one is not seen.
const GATHER_FOR: Duration = Duration::from_millis(100);

#[derive(Clone)]
pub struct ReportHandler {
    pub pool: PgPool,
    /// The safety valve's thresholds.
    pub valve: Valve,
    pub writer: ReportWriter,
    pub start_pushes: StartPushes,
}

/// What a channel report needs to accept a Live Activity's start push as
/// a send is accepted, and to nudge the relays after it.
#[derive(Clone)]
pub struct StartPushes {
    pub topic_counter: Addr<TopicCounter>,
    pub relay: Addr<JobRelay>,
    pub commands: Addr<CommandRelay>,
    pub tokens_per_job: u64,
}

impl ReportHandler {
    /// A handler and its writer, started on the current arbiter;
    /// `prefetch`: the reports consumer's (no more can be in hand at once).
    pub fn start(pool: PgPool, valve: Valve, prefetch: u16, start_pushes: StartPushes) -> Self {
        let writer = ReportWriter::start(pool.clone(), valve, prefetch);
        Self {
            pool,
            valve,
            writer,
            start_pushes,
        }
    }

    fn sending(&self) -> Sending<'_> {
        Sending {
            pool: &self.pool,
            topic_counter: &self.start_pushes.topic_counter,
            relay: &self.start_pushes.relay,
            tokens_per_job: self.start_pushes.tokens_per_job,
        }
    }

    /// Records a channel report; acked once committed.
    async fn channel_report(&self, report: ChannelReport, delivery: &Delivery) {
        let recorded = retry_database("record channel report", || {
            live_report::record(self.sending(), &report)
        })
        .await;
        match recorded {
            Ok(fate) => {
                let outcome = match (&fate, &report.outcome) {
                    (Fate::Duplicate, _) => "duplicate",
                    (_, ChannelOutcome::Created { .. }) => "created",
                    (_, ChannelOutcome::Sent) => "sent",
                    (_, ChannelOutcome::Deleted) => "deleted",
                    (_, ChannelOutcome::Refused { .. }) => "refused",
                    (_, ChannelOutcome::Failed { .. }) => "failed",
                };
                metrics::LIVE_ACTIVITY_REPORTS.with([outcome]).increment(1);
                if let Fate::Recorded {
                    start: Some((lane, jobs)),
                } = fate
                {
                    info!(live_activity.id = %report.activity_id, jobs, "live activity start push accepted");
                    committed(self.sending(), lane, jobs);
                }
                // Deletes it may have queued.
                let _ = self.start_pushes.commands.try_send(CommandsCommitted);
                ack(delivery).await;
            }
            Err(err) => give_back(delivery, "record channel report", &err).await,
        }
    }
}

impl DeliveryHandler for ReportHandler {
    fn handle(&self, delivery: Delivery) -> LocalBoxFuture<'static, ()> {
        let handler = self.clone();
        let span = process_span(&delivery);
        Box::pin(
            async move {
                let kind = header_text(&delivery.properties, headers::MESSAGE_TYPE);
                match kind.as_deref() {
                    Some(message_types::JOB_REPORT) => match decode::<JobReport>(&delivery.data) {
                        Ok(report) => {
                            let recorded = retry_database("record job report", || {
                                record_job(&handler.pool, &report, handler.valve)
                            })
                            .await;
                            settle("job", report.notification_id, recorded, &delivery, handler.valve).await;
                        }
                        Err(err) => dead_letter(&delivery, &err.to_string()).await,
                    },
                    Some(message_types::DELIVERY_REPORT) => match decode::<DeliveryReport>(&delivery.data) {
                        Ok(report) => match malformed(&report) {
                            Some(reason) => {
                                error!(notification.id = %report.batch_id.notification_id, reason, "delivery report refused; parked in the reports dead-letter queue");
                                dead_letter(&delivery, &reason).await;
                            }
                            // Acked by the writer once counted.
                            None => handler.writer.write(report, delivery).await,
                        },
                        Err(err) => dead_letter(&delivery, &err.to_string()).await,
                    },
                    Some(message_types::CHANNEL_REPORT) => match decode::<ChannelReport>(&delivery.data) {
                        Ok(report) => handler.channel_report(report, &delivery).await,
                        Err(err) => dead_letter(&delivery, &err.to_string()).await,
                    },
                    other => {
                        let reason = format!("unexpected message type {other:?} on the reports queue");
                        dead_letter(&delivery, &reason).await;
                    }
                }
            }
            .instrument(span),
        )
    }
}

/// Why a delivery report cannot be counted, when it cannot: no dispatcher
/// sends one that repeats an accept time or counts more accepts than pushes
/// sent, and counting it would corrupt its notification's figures.
fn malformed(report: &DeliveryReport) -> Option<String> {
    let mut times: Vec<u32> = report.accepts.iter().map(|b| b.after_ms).collect();
    times.sort_unstable();
    if times.windows(2).any(|pair| pair[0] == pair[1]) {
        return Some("its accept times repeat a bucket".to_owned());
    }
    let accepted: u64 = report.accepts.iter().map(|b| u64::from(b.count)).sum();
    if accepted > u64::from(report.counts.sent) {
        return Some(format!(
            "it counts {accepted} accepts for {} pushes sent",
            report.counts.sent
        ));
    }
    None
}

/// Acks a report once its fate is known, or gives it back when its write
/// failed.
async fn settle(
    kind: &'static str,
    id: Uuid,
    recorded: Result<Recorded, StoreError>,
    delivery: &Delivery,
    valve: Valve,
) {
    match recorded {
        Ok(Recorded::Counted(completion)) => {
            count_report(kind, "counted");
            if let Some(completion) = completion {
                announce(id, &completion, valve);
            }
            ack(delivery).await;
        }
        Ok(Recorded::UnknownNotification) => {
            count_report(kind, "unknown");
            warn!(notification.id = %id, "report for an unknown notification");
            ack(delivery).await;
        }
        Ok(Recorded::Duplicate) => {
            count_report(kind, "duplicate");
            debug!(notification.id = %id, "report already counted");
            ack(delivery).await;
        }
        Err(err) => give_back(delivery, "record report", &err).await,
    }
}

/// A delivery report waiting to be counted, with the message to ack.
struct Pending {
    report: DeliveryReport,
    delivery: Delivery,
}

/// Counts delivery reports in batches: one transaction for every report
/// waiting when the previous write ends, gathered for a while when few are.
#[derive(Clone)]
pub struct ReportWriter {
    queue: mpsc::Sender<Pending>,
}

impl ReportWriter {
    /// Starts the writer's task on the current arbiter.
    pub fn start(pool: PgPool, valve: Valve, prefetch: u16) -> Self {
        let (queue, waiting) = mpsc::channel(MAX_REPORTS_PER_WRITE);
        // Gathering past what the broker lets the consumer hold would only
        // wait out the window.
        let most = MAX_REPORTS_PER_WRITE.min(usize::from(prefetch.max(1)));
        actix::spawn(write_reports(waiting, pool, valve, most));
        Self { queue }
    }

    /// Hands a report to the writer (waiting while it is full); the message
    /// goes back to the queue if the writer has stopped.
    async fn write(&self, report: DeliveryReport, delivery: Delivery) {
        if let Err(mpsc::error::SendError(pending)) = self.queue.send(Pending { report, delivery }).await {
            requeue(&pending.delivery).await;
        }
    }
}

async fn write_reports(mut waiting: mpsc::Receiver<Pending>, pool: PgPool, valve: Valve, most: usize) {
    let mut batch = Vec::with_capacity(most);
    let mut last_write = Duration::ZERO;
    while waiting.recv_many(&mut batch, most).await > 0 {
        // After a long write the reports in hand have waited long enough.
        if last_write < GATHER_FOR {
            gather(&mut waiting, &mut batch, most, GATHER_FOR).await;
        }
        let started = tokio::time::Instant::now();
        write_batch(&pool, valve, std::mem::take(&mut batch))
            .instrument(tracing::info_span!("record delivery reports"))
            .await;
        last_write = started.elapsed();
    }
}

/// Adds to `batch` what arrives within `window` (from now), up to `most`
/// in all; returns early when the batch is full or the channel closed.
async fn gather<T>(waiting: &mut mpsc::Receiver<T>, batch: &mut Vec<T>, most: usize, window: Duration) {
    let until = tokio::time::Instant::now() + window;
    while batch.len() < most {
        let room = most - batch.len();
        match tokio::time::timeout_at(until, waiting.recv_many(batch, room)).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

async fn write_batch(pool: &PgPool, valve: Valve, batch: Vec<Pending>) {
    let (reports, deliveries): (Vec<DeliveryReport>, Vec<Delivery>) =
        batch.into_iter().map(|p| (p.report, p.delivery)).unzip();
    let recorded = retry_database("record delivery reports", || {
        record_deliveries(pool, &reports, valve)
    })
    .await;
    match recorded {
        Ok(fates) => {
            for ((fate, report), delivery) in fates.into_iter().zip(&reports).zip(&deliveries) {
                settle(
                    "delivery",
                    report.batch_id.notification_id,
                    Ok(fate),
                    delivery,
                    valve,
                )
                .await;
            }
        }
        // One report the database refuses must not hold back the others:
        // count them one by one, so only that one is parked.
        Err(err) if reports.len() > 1 && !err.is_transient() => {
            warn!(error = %err, reports = reports.len(), "a batch of reports was refused; counting them one by one");
            for (report, delivery) in reports.iter().zip(&deliveries) {
                let recorded =
                    retry_database("record delivery report", || record_delivery(pool, report, valve)).await;
                settle(
                    "delivery",
                    report.batch_id.notification_id,
                    recorded,
                    delivery,
                    valve,
                )
                .await;
            }
        }
        Err(err) => {
            for delivery in &deliveries {
                give_back(delivery, "record report", &err).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clarion_proto::{AcceptBucket, ApnsEnvironment, BatchId, DeliveryCounts, Platform, WireVersion};

    use super::*;

    fn report(sent: u32, accepts: &[(u32, u32)]) -> DeliveryReport {
        DeliveryReport {
            v: WireVersion::CURRENT,
            batch_id: BatchId {
                notification_id: Uuid::nil(),
                job_index: 0,
                seq: 0,
            },
            platform: Platform::Ios,
            environment: ApnsEnvironment::Production,
            counts: DeliveryCounts {
                sent,
                ..DeliveryCounts::default()
            },
            first_accept_at: None,
            last_accept_at: None,
            refused: None,
            accepts: accepts
                .iter()
                .map(|&(after_ms, count)| AcceptBucket { after_ms, count })
                .collect(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn reports_gather_for_the_window_then_are_written_together() {
        let (queue, mut waiting) = mpsc::channel(8);
        let mut batch = vec![0];
        let sender = tokio::spawn(async move {
            for n in 1..=3 {
                tokio::time::sleep(Duration::from_millis(30)).await;
                queue.send(n).await.expect("the writer waits");
            }
            // After the window: left for the next write.
            tokio::time::sleep(Duration::from_millis(100)).await;
            queue.send(4).await.expect("the writer waits");
        });
        let started = tokio::time::Instant::now();
        gather(&mut waiting, &mut batch, 8, Duration::from_millis(100)).await;
        assert_eq!(batch, [0, 1, 2, 3]);
        assert_eq!(started.elapsed(), Duration::from_millis(100));
        sender.await.expect("the sender ends");
        assert_eq!(waiting.recv().await, Some(4));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_or_a_closed_queue_ends_the_gathering_at_once() {
        let (queue, mut waiting) = mpsc::channel(8);
        for n in 1..=5 {
            queue.send(n).await.expect("room");
        }
        let mut batch = vec![0];
        let started = tokio::time::Instant::now();
        gather(&mut waiting, &mut batch, 3, Duration::from_secs(60)).await;
        assert_eq!(
            (batch.as_slice(), started.elapsed()),
            (&[0, 1, 2][..], Duration::ZERO)
        );
        drop(queue);
        let mut rest = Vec::new();
        gather(&mut waiting, &mut rest, 8, Duration::from_secs(60)).await;
        assert_eq!(
            (rest.as_slice(), started.elapsed()),
            (&[3, 4, 5][..], Duration::ZERO)
        );
    }

    #[test]
    fn reports_no_dispatcher_sends_are_refused_with_a_reason() {
        assert_eq!(malformed(&report(3, &[(0, 1), (10, 2)])), None);
        assert_eq!(malformed(&report(0, &[])), None);
        assert!(malformed(&report(2, &[(0, 1), (0, 1)])).is_some_and(|r| r.contains("repeat")));
        assert!(malformed(&report(1, &[(0, 2)])).is_some_and(|r| r.contains("2 accepts for 1")));
    }
}
