//! The shard-job handler: what a harvest worker does with each shard job.
//!
//! Each worker is one `QueueConsumer` actor on the harvest queue (manual
//! ack, bounded prefetch) that hands its deliveries, one at a time, to this
//! handler:
//!
//! 1. decode the job (an unreadable one is dead-lettered at once);
//! 2. harvest it — every batch confirmed by the broker;
//! 3. publish the job report (confirmed), then ack the job.
//!
//! Any failure returns the job to the queue after a pause that doubles with
//! each attempt; the queue's delivery limit (which also counts crashes)
//! bounds the attempts, after which the job is dead-lettered and the
//! coordinator marks the notification. A retried job republishes its batches
//! under the same ids, except those the ledger says an earlier attempt had
//! already published.

use std::time::{Duration, Instant};

use clarion_proto::codec::decode;
use clarion_proto::names::DELIVERY_LIMIT;
use clarion_proto::{JobOutcome, JobReport, ShardJob, WireVersion};
use clarion_runtime::amqp::consumer::{DeliveryHandler, ack, dead_letter, requeue};
use clarion_runtime::amqp::message::{delivery_count, trace_parent};
use futures::future::LocalBoxFuture;
use lapin::message::Delivery;
use tracing::field::Empty;
use tracing::{Instrument, info, warn};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::harvest::{HarvestContext, HarvestError, harvest};
use crate::metrics;

/// Longest pause before a failed job is retried.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct ShardJobHandler {
    pub context: HarvestContext,
    /// Pause before the first retry; doubled for each later one.
    pub retry_delay: Duration,
}

impl DeliveryHandler for ShardJobHandler {
    fn handle(&self, delivery: Delivery) -> LocalBoxFuture<'static, ()> {
        let worker = self.clone();
        Box::pin(async move {
            let job = match decode::<ShardJob>(&delivery.data) {
                Ok(job) => job,
                Err(err) => return dead_letter(&delivery, &err.to_string()).await,
            };
            let attempt = delivery_count(&delivery.properties) + 1;
            let span = tracing::info_span!(
                "harvest shard job",
                otel.kind = "consumer",
                messaging.system = "rabbitmq",
                messaging.operation.type = "process",
                messaging.destination.name = %delivery.exchange,
                notification.id = %job.notification_id,
                shard.range = %job.shards,
                job.index = job.job_index,
                attempt,
                tokens = Empty,
                batches = Empty,
            );
            let _ = span.set_parent(trace_parent(&delivery.properties));
            let started = Instant::now();
            match worker.run(&job).instrument(span.clone()).await {
                Ok(report) => {
                    if let JobOutcome::Harvested { devices, batches } = report.outcome {
                        let elapsed = started.elapsed();
                        let tokens = devices.total();
                        span.record("tokens", tokens);
                        span.record("batches", batches);
                        metrics::JOBS.with(["harvested"]).increment(1);
                        for (platform, count) in devices.iter() {
                            metrics::TOKENS.with([platform.as_str()]).increment(*count);
                        }
                        metrics::BATCHES.get().increment(u64::from(batches));
                        metrics::JOB_DURATION.get().record(elapsed.as_secs_f64());
                        span.in_scope(|| {
                            info!(
                                notification.id = %job.notification_id,
                                job = job.job_index,
                                shards = %job.shards,
                                attempt,
                                devices = ?devices,
                                batches,
                                elapsed_ms = elapsed.as_millis() as u64,
                                tokens_per_s = (tokens as f64 / elapsed.as_secs_f64().max(1e-6)) as u64,
                                "shard job harvested"
                            )
                        });
                    }
                    ack(&delivery).await;
                }
                Err(err) => {
                    let delay = worker.retry_delay_for(attempt);
                    metrics::JOBS.with(["failed"]).increment(1);
                    span.in_scope(|| {
                        warn!(
                            notification.id = %job.notification_id,
                            job = job.job_index,
                            attempt,
                            attempts_allowed = DELIVERY_LIMIT + 1,
                            error = %err,
                            retry_in_ms = delay.as_millis() as u64,
                            "shard job failed"
                        )
                    });
                    tokio::time::sleep(delay).await;
                    requeue(&delivery).await;
                }
            }
        })
    }
}

impl ShardJobHandler {
    /// Harvests the job and reports it; the report is confirmed before this
    /// returns, so the job may be acked.
    async fn run(&self, job: &ShardJob) -> Result<JobReport, HarvestError> {
        let totals = harvest(job, &self.context).await?;
        let report = JobReport {
            v: WireVersion::CURRENT,
            notification_id: job.notification_id,
            job_index: job.job_index,
            outcome: JobOutcome::Harvested {
                devices: totals.devices,
                batches: totals.batches,
            },
        };
        let message = self.context.publisher.outgoing(&report)?;
        self.context.publisher.publish(&message).await?;
        Ok(report)
    }

    fn retry_delay_for(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(16));
        self.retry_delay.saturating_mul(factor).min(MAX_RETRY_DELAY)
    }
}
