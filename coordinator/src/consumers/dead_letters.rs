//! The dead-letter watch queue: copies of everything given up, by any work
//! queue. A shard job is recorded as a failed job, a token batch as a
//! report of failed pushes, so the notification's status says what was lost
//! and the notification can still complete. A report that could not be
//! recorded fails its notification with a reason (its progress can no
//! longer be trusted); a cleanup that could not be recorded is counted on
//! it (`cleanup.parked`; its registrations stay). The originals stay in the
//! dead-letter queues for inspection.

use clarion_proto::codec::decode;
use clarion_proto::names::{DELIVERY_LIMIT, headers, message_types};
use clarion_proto::{
    DeliveryCounts, DeliveryReport, JobOutcome, JobReport, ShardJob, TokenBatch, TokenCleanup, WireVersion,
};
use clarion_runtime::PgPool;
use clarion_runtime::amqp::consumer::{DeliveryHandler, ack, requeue};
use clarion_runtime::amqp::message::header_text;
use clarion_runtime::db::DbError;
use futures::future::LocalBoxFuture;
use lapin::message::Delivery;
use tracing::{Instrument, error, warn};
use uuid::Uuid;

use super::{count_report, process_span, retry_database};
use crate::progress::completion::{Valve, announce};
use crate::progress::{Recorded, record_delivery, record_job};
use crate::store::StoreError;
use crate::store::notifications;

#[derive(Clone)]
pub struct DeadLetterHandler {
    pub pool: PgPool,
    /// The safety valve's thresholds.
    pub valve: Valve,
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
                    Some(message_types::JOB_REPORT | message_types::DELIVERY_REPORT) => {
                        handler.report_given_up(&delivery).await
                    }
                    Some(message_types::TOKEN_CLEANUP) => match decode::<TokenCleanup>(&delivery.data) {
                        Ok(cleanup) => handler.cleanup_given_up(&cleanup).await,
                        Err(err) => {
                            warn!(error = %err, "unreadable dead-lettered token cleanup");
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
                    Err(err) if err.is_transient() => requeue(&delivery).await,
                    Err(err) => {
                        // The original stays in its dead-letter queue.
                        error!(error = %err, "dead letter cannot be recorded on its notification");
                        count_report("dead_letter", "unrecorded");
                        ack(&delivery).await;
                    }
                }
            }
            .instrument(span),
        )
    }
}

impl DeadLetterHandler {
    /// A job or delivery report the coordinator could not record: its
    /// notification's counts are now incomplete, so it fails, saying why.
    async fn report_given_up(&self, delivery: &Delivery) -> Result<(), StoreError> {
        let id = header_text(&delivery.properties, headers::NOTIFICATION_ID)
            .and_then(|id| id.parse::<Uuid>().ok());
        let Some(id) = id else {
            warn!("dead-lettered report names no notification; left for inspection only");
            return Ok(());
        };
        let reason = "a report could not be recorded and was parked in the reports dead-letter \
                      queue; the coordinator's log says why";
        let failed = retry_database("fail notification", || async {
            let conn = self.pool.get().await.map_err(DbError::from)?;
            notifications::fail(&*conn, id, reason).await
        })
        .await?;
        if failed {
            error!(notification.id = %id, %reason, "notification failed: a report was given up");
        }
        Ok(())
    }

    async fn cleanup_given_up(&self, cleanup: &TokenCleanup) -> Result<(), StoreError> {
        error!(
            notification.id = %cleanup.notification_id,
            tokens = cleanup.tokens.len(),
            reason = ?cleanup.reason,
            "token cleanup given up; its registrations are kept"
        );
        retry_database("count parked cleanup", || async {
            let conn = self.pool.get().await.map_err(DbError::from)?;
            notifications::count_parked_cleanup(&*conn, cleanup.notification_id).await
        })
        .await
    }

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
            record_job(&self.pool, &report, self.valve)
        })
        .await?;
        if let Recorded::Counted(Some(completion)) = recorded {
            announce(job.notification_id, &completion, self.valve);
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
            environment: batch.environment,
            counts: DeliveryCounts {
                failed: batch.tokens.len() as u32,
                ..DeliveryCounts::default()
            },
            first_accept_at: None,
            last_accept_at: None,
            refused: None,
            accepts: Vec::new(),
        };
        let recorded = retry_database("record failed batch", || {
            record_delivery(&self.pool, &report, self.valve)
        })
        .await?;
        if let Recorded::Counted(Some(completion)) = recorded {
            announce(batch.batch_id.notification_id, &completion, self.valve);
        }
        Ok(())
    }
}
