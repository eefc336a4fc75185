//! The dead-letter watch queue: copies of shard jobs the harvesters gave up
//! on (after the queue's delivery limit). Each is recorded as a failed job,
//! so the notification's status says what was lost; the original stays in
//! the harvest queue's dead-letter queue for inspection.

use clarion_proto::codec::decode;
use clarion_proto::names::{DELIVERY_LIMIT, headers, message_types};
use clarion_proto::{JobOutcome, JobReport, ShardJob, WireVersion};
use clarion_runtime::PgPool;
use clarion_runtime::consumer::{DeliveryHandler, ack, requeue};
use clarion_runtime::message::header_text;
use futures::future::LocalBoxFuture;
use lapin::message::Delivery;
use tracing::{error, warn};

use super::retry_database;
use crate::store::notifications::record_job;

#[derive(Clone)]
pub struct DeadLetterHandler {
    pub pool: PgPool,
}

impl DeliveryHandler for DeadLetterHandler {
    fn handle(&self, delivery: Delivery) -> LocalBoxFuture<'static, ()> {
        let pool = self.pool.clone();
        Box::pin(async move {
            let kind = header_text(&delivery.properties, headers::MESSAGE_TYPE);
            if kind.as_deref() != Some(message_types::SHARD_JOB) {
                warn!(message_type = ?kind, "dead-lettered message left for inspection only");
                return ack(&delivery).await;
            }
            let job = match decode::<ShardJob>(&delivery.data) {
                Ok(job) => job,
                Err(err) => {
                    warn!(error = %err, "unreadable dead-lettered shard job");
                    return ack(&delivery).await;
                }
            };
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
            match retry_database("record failed job", || record_job(&pool, &report)).await {
                Ok(_) => ack(&delivery).await,
                Err(_) => requeue(&delivery).await,
            }
        })
    }
}
