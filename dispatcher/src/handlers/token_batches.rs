//! The token-batch handler: what a batch worker does with each token batch.
//!
//! Each worker is one `QueueConsumer` actor on the platform's delivery queue
//! (manual ack, bounded prefetch) that hands its batches, one at a time, to
//! this handler:
//!
//! 1. decode the batch (an unreadable or misrouted one is dead-lettered);
//! 2. deliver it on the delivery runtime (see [`crate::delivery`]);
//! 3. publish the delivery report and the tokens to clean up, confirmed;
//! 4. ack. If the report cannot be published the batch goes back to the
//!    queue and is delivered again: a crash re-sends only batches in flight.
//!
//! A broker restart must not push a batch twice: a batch being pushed when
//! the channel dies is finished, and its report is published as soon as the
//! broker is back (the handler keeps trying for [`REPORT_PATIENCE`] instead
//! of giving the batch back). The copy the broker redelivers meanwhile (to
//! another worker of this process) waits while the batch is in hand here,
//! and a batch whose report this process published is acked again without
//! a push — the batches delivered lately are remembered for that
//! ([`DELIVERED_REMEMBERED`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clarion_proto::codec::decode;
use clarion_proto::platform::segment;
use clarion_proto::{
    BatchId, CleanupReason, DeliveryCounts, DeliveryReport, Platform, TokenBatch, TokenCleanup, WireVersion,
};
use clarion_runtime::amqp::consumer::{DeliveryHandler, ack, dead_letter, requeue};
use clarion_runtime::amqp::message::trace_parent;
use clarion_runtime::amqp::publisher::{Outgoing, PublishError, Publisher};
use clarion_runtime::recent::Recent;
use futures::future::LocalBoxFuture;
use lapin::message::Delivery;
use opentelemetry::KeyValue;
use tracing::field::Empty;
use tracing::{Instrument, debug, error, info, warn};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::breaker::Breaker;
use crate::channel::PushChannel;
use crate::delivery::{BatchOutcome, Deliverer};
use crate::metrics;

/// A batch as this process knows it: its id and the digest of its tokens
/// (a job re-cut after registrations changed republishes shifted batches,
/// other devices, under the same ids — those must be pushed).
pub type BatchKey = (BatchId, u64);

/// Batches remembered as delivered: far more than a process has in hand
/// (workers × prefetch) or could get back after one broker restart.
pub const DELIVERED_REMEMBERED: usize = 16_384;
/// How long a delivered batch's report is retried (the broker restarting)
/// before the batch goes back to its queue; also how long a redelivered
/// copy waits for the worker that has the batch in hand.
pub const REPORT_PATIENCE: Duration = Duration::from_secs(60);
/// How often a redelivered copy looks whether its batch is still in hand.
const TWIN_POLL: Duration = Duration::from_millis(50);
/// Invalid tokens above this share of a batch are logged as a warning: a
/// sign of a wrong bundle id, project or environment (the coordinator
/// decides what to delete).
const SUSPICIOUS_INVALID_SHARE: f64 = 0.05;

pub struct TokenBatchHandler<C: PushChannel> {
    pub deliverer: Arc<Deliverer<C>>,
    /// Where pushes run (a multi-threaded runtime).
    pub runtime: tokio::runtime::Handle,
    pub publisher: Publisher,
    /// Batches whose report this process published lately.
    pub delivered: Recent<BatchKey>,
    /// Batches some worker of this process is delivering now (at most
    /// workers × prefetch).
    pub in_hand: Arc<Mutex<HashSet<BatchKey>>>,
    /// Stops a segment whose first pushes all went wrong.
    pub breaker: Arc<Breaker>,
}

impl<C: PushChannel> Clone for TokenBatchHandler<C> {
    fn clone(&self) -> Self {
        Self {
            deliverer: self.deliverer.clone(),
            runtime: self.runtime.clone(),
            publisher: self.publisher.clone(),
            delivered: self.delivered.clone(),
            in_hand: self.in_hand.clone(),
            breaker: self.breaker.clone(),
        }
    }
}

impl<C: PushChannel> DeliveryHandler for TokenBatchHandler<C> {
    fn handle(&self, delivery: Delivery) -> LocalBoxFuture<'static, ()> {
        let worker = self.clone();
        Box::pin(async move {
            let batch = match decode::<TokenBatch>(&delivery.data) {
                Ok(batch) if batch.platform == C::PLATFORM => batch,
                Ok(batch) => {
                    return dead_letter(
                        &delivery,
                        &format!("a {} batch on the {} queue", batch.platform, C::PLATFORM),
                    )
                    .await;
                }
                Err(err) => return dead_letter(&delivery, &err.to_string()).await,
            };
            let key = (batch.batch_id, batch.tokens_digest());
            let _in_hand = match worker.take_in_hand(key).await {
                InHand::Taken(guard) => guard,
                InHand::Delivered => {
                    debug!(batch = %batch.batch_id, "batch already delivered and reported; acked again without a push");
                    count_batch(batch.platform, "already_delivered");
                    return ack(&delivery).await;
                }
                InHand::Busy => {
                    warn!(batch = %batch.batch_id, "batch still in hand elsewhere in this process; given back");
                    count_batch(batch.platform, "requeued");
                    return requeue(&delivery).await;
                }
            };
            let span = tracing::info_span!(
                "deliver batch",
                otel.kind = "consumer",
                messaging.system = "rabbitmq",
                messaging.operation.type = "process",
                messaging.destination.name = %delivery.exchange,
                notification.id = %batch.batch_id.notification_id,
                batch.id = %batch.batch_id,
                platform = %batch.platform,
                provider = C::PROVIDER,
                tokens = batch.tokens.len(),
                sent = Empty,
                failed = Empty,
                invalid = Empty,
                unregistered = Empty,
                retries = Empty,
            );
            let _ = span.set_parent(trace_parent(&delivery.properties));
            let started = std::time::Instant::now();
            let batch = Arc::new(batch);
            let notification = batch.batch_id.notification_id;
            let segment = segment(batch.platform, batch.environment);
            let outcome = if worker.breaker.is_open(notification, segment) {
                held_back(&batch)
            } else {
                let deliverer = worker.deliverer.clone();
                let delivering = batch.clone();
                match worker
                    .runtime
                    .spawn(async move { deliverer.deliver(&delivering).await }.instrument(span.clone()))
                    .await
                {
                    Ok(outcome) => outcome,
                    Err(err) => {
                        warn!(batch = %batch.batch_id, error = %err, "delivery task failed");
                        count_batch(batch.platform, "requeued");
                        return requeue(&delivery).await;
                    }
                }
            };
            let failures = outcome.failures.iter().map(|(reason, count)| (*reason, *count));
            if worker
                .breaker
                .observe(notification, segment, &outcome.counts, failures)
            {
                metrics::breaker_opened(batch.platform).increment(1);
                error!(
                    notification.id = %notification,
                    segment,
                    "ALERT: every one of this segment's first pushes was answered gone, invalid or as if \
                     misconfigured; holding back the rest of the segment (check {})",
                    C::SETTINGS_TO_CHECK
                );
            }
            let elapsed = started.elapsed();
            span.in_scope(|| observe::<C>(&batch, &outcome, elapsed));
            // Built inside the batch's span: the reports carry its context.
            let messages = span.in_scope(|| worker.messages(&batch, outcome));
            match messages {
                Ok(messages) => match worker.publish_report(&messages).instrument(span).await {
                    Ok(()) => {
                        worker.delivered.insert(key);
                        count_batch(batch.platform, "delivered");
                        ack(&delivery).await;
                    }
                    Err(err) => {
                        warn!(batch = %batch.batch_id, error = %err, "report not confirmed; the batch goes back to the queue");
                        count_batch(batch.platform, "requeued");
                        requeue(&delivery).await;
                    }
                },
                Err(err) => {
                    warn!(batch = %batch.batch_id, error = %err, "report not encoded");
                    count_batch(batch.platform, "requeued");
                    requeue(&delivery).await;
                }
            }
        })
    }
}

/// A batch the breaker holds back: every token counted, none pushed.
fn held_back(batch: &TokenBatch) -> BatchOutcome {
    BatchOutcome {
        counts: DeliveryCounts {
            held_back: batch.tokens.len() as u32,
            ..DeliveryCounts::default()
        },
        ..BatchOutcome::default()
    }
}

fn count_batch(platform: Platform, outcome: &'static str) {
    metrics::batches(platform, outcome).increment(1);
}

/// What a worker found when it took a batch.
enum InHand {
    /// It is this worker's now; the guard gives it up when dropped.
    Taken(InHandGuard),
    /// This process delivered and reported it already.
    Delivered,
    /// Another worker of this process still has it after [`REPORT_PATIENCE`].
    Busy,
}

struct InHandGuard {
    in_hand: Arc<Mutex<HashSet<BatchKey>>>,
    id: BatchKey,
}

impl Drop for InHandGuard {
    fn drop(&mut self) {
        self.in_hand
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

impl<C: PushChannel> TokenBatchHandler<C> {
    /// Takes batch `id` in hand, unless this process delivered it already;
    /// a copy of a batch another worker has (a redelivery after the broker
    /// restarted) waits for that worker first.
    async fn take_in_hand(&self, id: BatchKey) -> InHand {
        let deadline = tokio::time::Instant::now() + REPORT_PATIENCE;
        loop {
            if self.delivered.contains(&id) {
                return InHand::Delivered;
            }
            if self.in_hand.lock().unwrap_or_else(|p| p.into_inner()).insert(id) {
                return InHand::Taken(InHandGuard {
                    in_hand: self.in_hand.clone(),
                    id,
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return InHand::Busy;
            }
            tokio::time::sleep(TWIN_POLL).await;
        }
    }

    /// Publishes a delivered batch's report and cleanups, retrying while the
    /// broker is away for up to [`REPORT_PATIENCE`]: re-pushing the whole
    /// batch would cost far more than waiting.
    async fn publish_report(&self, messages: &[Outgoing]) -> Result<(), PublishError> {
        self.publisher.publish_all_within(messages, REPORT_PATIENCE).await
    }

    /// The delivery report and the cleanups of a delivered batch.
    fn messages(&self, batch: &TokenBatch, outcome: BatchOutcome) -> Result<Vec<Outgoing>, PublishError> {
        let id = batch.batch_id.notification_id;
        let report = DeliveryReport {
            v: WireVersion::CURRENT,
            batch_id: batch.batch_id,
            platform: batch.platform,
            environment: batch.environment,
            counts: outcome.counts,
            first_accept_at: outcome.first_accept_at,
            last_accept_at: outcome.last_accept_at,
            accepts: outcome.accepts,
            refused: outcome.refused,
        };
        let mut messages = vec![self.publisher.outgoing(&report)?];
        for (reason, tokens) in [
            (CleanupReason::Unregistered, outcome.unregistered),
            (CleanupReason::Invalid, outcome.invalid),
        ] {
            if tokens.is_empty() {
                continue;
            }
            let cleanup = TokenCleanup {
                v: WireVersion::CURRENT,
                notification_id: id,
                platform: batch.platform,
                environment: batch.environment,
                reason,
                tokens,
            };
            messages.push(self.publisher.outgoing(&cleanup)?);
        }
        Ok(messages)
    }
}

/// Logs, records on the batch's span and counts what became of a batch:
/// once per batch, never once per token.
fn observe<C: PushChannel>(batch: &TokenBatch, outcome: &BatchOutcome, elapsed: std::time::Duration) {
    let counts = &outcome.counts;
    let id: BatchId = batch.batch_id;
    let tokens = batch.tokens.len();
    let span = tracing::Span::current();
    span.record("sent", counts.sent);
    span.record("failed", counts.failed);
    span.record("invalid", counts.invalid);
    span.record("unregistered", counts.unregistered);
    span.record("retries", outcome.retries);
    if !outcome.failures.is_empty() {
        let reasons = outcome
            .failures
            .iter()
            .map(|(reason, count)| KeyValue::new(*reason, i64::from(*count)))
            .collect();
        span.add_event("push failures", reasons);
    }
    let platform = batch.platform;
    let results = [
        ("sent", counts.sent),
        ("failed", counts.failed),
        ("invalid", counts.invalid),
        ("unregistered", counts.unregistered),
        ("expired", counts.expired),
        ("dry_run", counts.dry_run),
        ("cancelled", counts.cancelled),
        ("held_back", counts.held_back),
    ];
    for (result, count) in results {
        if count > 0 {
            metrics::pushes(platform, result).increment(u64::from(count));
        }
    }
    for (reason, count) in &outcome.failures {
        metrics::push_failures(platform, reason).increment(u64::from(*count));
    }
    metrics::retries(platform).increment(u64::from(outcome.retries));
    metrics::batch_duration(platform).record(elapsed.as_secs_f64());
    info!(
        notification.id = %id.notification_id,
        batch = %id,
        platform = %batch.platform,
        tokens,
        sent = counts.sent,
        failed = counts.failed,
        invalid = counts.invalid,
        unregistered = counts.unregistered,
        expired = counts.expired,
        dry_run = counts.dry_run,
        cancelled = counts.cancelled,
        retries = outcome.retries,
        failures = ?outcome.failures,
        elapsed_ms = elapsed.as_millis() as u64,
        "batch delivered"
    );
    let impostor = outcome
        .failures
        .iter()
        .find(|(reason, _)| **reason == C::NOT_THE_PROVIDER);
    if let Some((reason, count)) = impostor {
        error!(
            notification.id = %id.notification_id,
            batch = %id,
            provider = %batch.platform,
            reason = *reason,
            pushes = *count,
            "the provider endpoint answers like no {} server: check {}; the tokens are kept and the pushes \
             counted failed",
            C::PROVIDER,
            C::ENDPOINT_SETTING
        );
    }
    if tokens > 0 && f64::from(counts.invalid) / tokens as f64 > SUSPICIOUS_INVALID_SHARE {
        warn!(
            notification.id = %id.notification_id,
            batch = %id,
            invalid = counts.invalid,
            tokens,
            "many tokens refused as invalid: check {}",
            C::SETTINGS_TO_CHECK
        );
    }
}
