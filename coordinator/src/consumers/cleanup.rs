//! The cleanup queue: tokens Apple / Google reported gone (deleted at once)
//! or refused as invalid (held until the notification's decision, so a
//! misconfiguration never wipes the audience).

use clarion_proto::TokenCleanup;
use clarion_proto::codec::decode;
use clarion_runtime::PgPool;
use clarion_runtime::amqp::consumer::{DeliveryHandler, ack, dead_letter};
use futures::future::LocalBoxFuture;
use lapin::message::Delivery;
use tracing::{Instrument, debug, warn};

use super::{count_report, give_back, process_span, retry_database};
use crate::metrics;
use crate::progress::{Cleaned, record_cleanup};

#[derive(Clone)]
pub struct CleanupHandler {
    pub pool: PgPool,
}

impl DeliveryHandler for CleanupHandler {
    fn handle(&self, delivery: Delivery) -> LocalBoxFuture<'static, ()> {
        let pool = self.pool.clone();
        let span = process_span(&delivery);
        Box::pin(async move {
            let cleanup = match decode::<TokenCleanup>(&delivery.data) {
                Ok(cleanup) => cleanup,
                Err(err) => return dead_letter(&delivery, &err.to_string()).await,
            };
            match retry_database("token cleanup", || record_cleanup(&pool, &cleanup)).await {
                Ok(Cleaned::UnknownNotification) => {
                    warn!(notification.id = %cleanup.notification_id, "cleanup for an unknown notification");
                    ack(&delivery).await;
                }
                Ok(cleaned) => {
                    count_report("cleanup", "counted");
                    if let Cleaned::Deleted(rows) = cleaned {
                        metrics::REGISTRATIONS_DELETED.get().increment(rows);
                    }
                    debug!(
                        notification.id = %cleanup.notification_id,
                        reason = ?cleanup.reason,
                        tokens = cleanup.tokens.len(),
                        ?cleaned,
                        "token cleanup"
                    );
                    ack(&delivery).await;
                }
                Err(err) => give_back(&delivery, "token cleanup", &err).await,
            }
        }
        .instrument(span))
    }
}
