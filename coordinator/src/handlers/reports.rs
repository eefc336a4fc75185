//! The reports queue: job reports from harvesters and delivery reports from
//! dispatchers, each counted into its notification's progress exactly once.

use clarion_proto::codec::decode;
use clarion_proto::names::{headers, message_types};
use clarion_proto::{DeliveryReport, JobReport};
use clarion_runtime::PgPool;
use clarion_runtime::amqp::consumer::{DeliveryHandler, ack, dead_letter};
use clarion_runtime::amqp::message::header_text;
use futures::future::LocalBoxFuture;
use lapin::message::Delivery;
use tracing::{Instrument, debug, warn};

use super::{count_report, give_back, process_span, retry_database};
use crate::progress::completion::{Valve, announce};
use crate::progress::{Recorded, record_delivery, record_job};

#[derive(Clone)]
pub struct ReportHandler {
    pub pool: PgPool,
    /// The safety valve's thresholds.
    pub valve: Valve,
}

impl DeliveryHandler for ReportHandler {
    fn handle(&self, delivery: Delivery) -> LocalBoxFuture<'static, ()> {
        let handler = self.clone();
        let span = process_span(&delivery);
        Box::pin(
            async move {
                let kind = header_text(&delivery.properties, headers::MESSAGE_TYPE);
                let (id, recorded) = match kind.as_deref() {
                    Some(message_types::JOB_REPORT) => match decode::<JobReport>(&delivery.data) {
                        Ok(report) => (
                            report.notification_id,
                            retry_database("record job report", || {
                                record_job(&handler.pool, &report, handler.valve)
                            })
                            .await,
                        ),
                        Err(err) => return dead_letter(&delivery, &err.to_string()).await,
                    },
                    Some(message_types::DELIVERY_REPORT) => match decode::<DeliveryReport>(&delivery.data) {
                        Ok(report) => (
                            report.batch_id.notification_id,
                            retry_database("record delivery report", || {
                                record_delivery(&handler.pool, &report, handler.valve)
                            })
                            .await,
                        ),
                        Err(err) => return dead_letter(&delivery, &err.to_string()).await,
                    },
                    other => {
                        let reason = format!("unexpected message type {other:?} on the reports queue");
                        return dead_letter(&delivery, &reason).await;
                    }
                };
                let kind = if kind.as_deref() == Some(message_types::JOB_REPORT) {
                    "job"
                } else {
                    "delivery"
                };
                match recorded {
                    Ok(Recorded::Counted(completion)) => {
                        count_report(kind, "counted");
                        if let Some(completion) = completion {
                            announce(id, &completion, handler.valve);
                        }
                        ack(&delivery).await;
                    }
                    Ok(Recorded::UnknownNotification) => {
                        count_report(kind, "unknown");
                        warn!(notification.id = %id, "report for an unknown notification");
                        ack(&delivery).await;
                    }
                    Ok(Recorded::Duplicate) => {
                        count_report(kind, "duplicate");
                        debug!(notification.id = %id, "report already counted");
                        ack(&delivery).await;
                    }
                    Err(err) => give_back(&delivery, "record report", &err).await,
                }
            }
            .instrument(span),
        )
    }
}
