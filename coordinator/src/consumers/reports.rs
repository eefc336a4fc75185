//! The reports queue: job reports from harvesters (and, with the delivery
//! stage, delivery reports from dispatchers), counted into each
//! notification's progress exactly once.

use clarion_proto::JobReport;
use clarion_proto::codec::decode;
use clarion_proto::names::{headers, message_types};
use clarion_runtime::PgPool;
use clarion_runtime::consumer::{DeliveryHandler, ack, dead_letter, requeue};
use clarion_runtime::message::header_text;
use futures::future::LocalBoxFuture;
use lapin::message::Delivery;
use tracing::{debug, warn};

use super::retry_database;
use crate::store::notifications::{Recorded, record_job};

#[derive(Clone)]
pub struct ReportHandler {
    pub pool: PgPool,
}

impl DeliveryHandler for ReportHandler {
    fn handle(&self, delivery: Delivery) -> LocalBoxFuture<'static, ()> {
        let pool = self.pool.clone();
        Box::pin(async move {
            match header_text(&delivery.properties, headers::MESSAGE_TYPE).as_deref() {
                Some(message_types::JOB_REPORT) => match decode::<JobReport>(&delivery.data) {
                    Ok(report) => {
                        match retry_database("record job report", || record_job(&pool, &report)).await {
                            Ok(recorded) => {
                                if recorded == Recorded::UnknownNotification {
                                    warn!(notification.id = %report.notification_id, "job report for an unknown notification");
                                }
                                debug!(notification.id = %report.notification_id, job = report.job_index, ?recorded, "job report");
                                ack(&delivery).await;
                            }
                            Err(_) => requeue(&delivery).await,
                        }
                    }
                    Err(err) => dead_letter(&delivery, &err.to_string()).await,
                },
                other => {
                    dead_letter(
                        &delivery,
                        &format!("unexpected message type {other:?} on the reports queue"),
                    )
                    .await
                }
            }
        })
    }
}
