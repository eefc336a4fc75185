//! The dead-letter watch queue: copies of shard jobs and token batches given
//! up after their queue's delivery limit. A job is recorded as a failed job,
//! a batch as a report of failed pushes, so the notification's status says
//! what was lost and the notification can still complete; the originals stay
//! in the dead-letter queues for inspection.

use clarion_proto::codec::decode;
use clarion_proto::names::{DELIVERY_LIMIT, headers, message_types};
use clarion_proto::{
    DeliveryCounts, DeliveryReport, JobOutcome, JobReport, ShardJob, TokenBatch, WireVersion,
};
use clarion_runtime::PgPool;
use clarion_runtime::amqp::consumer::{DeliveryHandler, ack, requeue};
use clarion_runtime::amqp::message::header_text;
use futures::future::LocalBoxFuture;
use lapin::message::Delivery;
use tracing::{Instrument, error, warn};

use super::{count_report, process_span, retry_database};
use crate::progress::completion::announce;
use crate::progress::{Recorded, record_delivery, record_job};
use crate::store::StoreError;

#[derive(Clone)]
pub struct DeadLetterHandler {
    pub pool: PgPool,
    pub invalid_threshold: f64,
}

impl DeliveryHandler for DeadLetterHandler {
    fn handle(&self, delivery: Delivery) -> LocalBoxFuture<'static, ()> {
        let handler = self.clone();
        let span = process_span(&delivery);
        Box::pin(
            async move {
                let kind = header_text(&delivery.properties, headers::MESSAGE_TYPE);
                let recorded = match kind.as_deref() {
                    Some(message_types::SHARD_JOB) => match decode::<ShardJob>(&delivery.data) {
                        Ok(job) => handler.job_given_up(&job).await,
                        Err(err) => {
                            warn!(error = %err, "unreadable dead-lettered shard job");
                            return ack(&delivery).await;
                        }
                    },
                    Some(message_types::TOKEN_BATCH) => match decode::<TokenBatch>(&delivery.data) {
                        Ok(batch) => handler.batch_given_up(&batch).await,
                        Err(err) => {
                            warn!(error = %err, "unreadable dead-lettered token batch");
                            return ack(&delivery).await;
                        }
                    },
                    other => {
                        warn!(message_type = ?other, "dead-lettered message left for inspection only");
                        return ack(&delivery).await;
                    }
                };
                match recorded {
                    Ok(()) => {
                        count_report("dead_letter", "counted");
                        ack(&delivery).await;
                    }
                    Err(_) => requeue(&delivery).await,
                }
            }
            .instrument(span),
        )
    }
}

impl DeadLetterHandler {
    async fn job_given_up(&self, job: &ShardJob) -> Result<(), StoreError> {
        error!(
            notification.id = %job.notification_id,
            job = job.job_index,
            shards = %job.shards,
            "shard job given up after {DELIVERY_LIMIT} deliveries; its devices were not harvested"
        );
        let report = JobReport {
            v: WireVersion::CURRENT,
            notification_id: job.notification_id,
            job_index: job.job_index,
            outcome: JobOutcome::Failed {
                reason: format!(
                    "shard range {} given up after {DELIVERY_LIMIT} deliveries",
                    job.shards
                ),
            },
        };
        let recorded = retry_database("record failed job", || {
            record_job(&self.pool, &report, self.invalid_threshold)
        })
        .await?;
        if let Recorded::Counted(Some(completion)) = recorded {
            announce(job.notification_id, &completion, self.invalid_threshold);
        }
        Ok(())
    }

    async fn batch_given_up(&self, batch: &TokenBatch) -> Result<(), StoreError> {
        error!(
            notification.id = %batch.batch_id.notification_id,
            batch = %batch.batch_id,
            tokens = batch.tokens.len(),
            "token batch given up after {DELIVERY_LIMIT} deliveries; its pushes count as failed"
        );
        let report = DeliveryReport {
            v: WireVersion::CURRENT,
            batch_id: batch.batch_id,
            platform: batch.platform,
            counts: DeliveryCounts {
                failed: batch.tokens.len() as u32,
                ..DeliveryCounts::default()
            },
            first_accept_at: None,
            last_accept_at: None,
            accepts: Vec::new(),
        };
        let recorded = retry_database("record failed batch", || {
            record_delivery(&self.pool, &report, self.invalid_threshold)
        })
        .await?;
        if let Recorded::Counted(Some(completion)) = recorded {
            announce(
                batch.batch_id.notification_id,
                &completion,
                self.invalid_threshold,
            );
        }
        Ok(())
    }
}
