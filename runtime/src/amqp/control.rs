//! Control messages (cancellations) for every harvester and dispatcher,
//! including those that start or reconnect after a message was sent.
//!
//! The coordinator publishes to the control exchange, which feeds the
//! control log: a stream queue that keeps every message for
//! [`CONTROL_LOG_MAX_AGE`](clarion_proto::names::CONTROL_LOG_MAX_AGE). Each
//! process reads the log from its first message, keeps the cancellations in
//! memory (checking one is a hash lookup, not a database query per batch)
//! and goes on reading new messages as they arrive. To know when it has
//! read everything logged before it started, it writes its own mark on the
//! log and reads up to it; until then [`Cancellations::up_to_date`] waits,
//! and harvest and delivery wait with it. So once the coordinator has the
//! broker's confirm for a cancellation, no process that reads the log pushes
//! that notification again: not one that was stopped, reconnecting, or
//! started later. A lost subscription makes the process wait again until it
//! has re-read the log.

use std::sync::Arc;
use std::time::Duration;

use clarion_proto::codec::decode;
use clarion_proto::{Control, ControlCommand, Names, WireVersion};
use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use tokio::sync::watch;
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::amqp::broker::BrokerLink;
use crate::amqp::publisher::{PublishError, Publisher};
use crate::recent::Recent;

/// Cancellations remembered per process: far more notifications than are
/// ever in flight at once; the oldest are forgotten first.
const REMEMBERED: usize = 10_000;
/// Unacked control-log messages the broker sends ahead (streams need a
/// prefetch): enough to replay a month of cancellations quickly.
const LOG_PREFETCH: u16 = 500;

/// The notifications cancelled, and whether the whole control log has been
/// read. Cheap to clone.
#[derive(Clone)]
pub struct Cancellations {
    cancelled: Recent<Uuid>,
    up_to_date: Arc<watch::Sender<bool>>,
}

impl Default for Cancellations {
    fn default() -> Self {
        Self {
            cancelled: Recent::new(REMEMBERED),
            up_to_date: Arc::new(watch::channel(false).0),
        }
    }
}

impl Cancellations {
    pub fn is_cancelled(&self, id: Uuid) -> bool {
        self.cancelled.contains(&id)
    }

    pub fn cancel(&self, id: Uuid) {
        self.cancelled.insert(id);
    }

    /// Resolves once every control message logged before this process
    /// (re)subscribed has been read: only then may it harvest or push.
    pub async fn up_to_date(&self) {
        let mut watching = self.up_to_date.subscribe();
        // Err only if the sender is gone, and `self` holds it.
        let _ = watching.wait_for(|current| *current).await;
    }

    /// Whether the whole log has been read (for logs and tests).
    pub fn is_up_to_date(&self) -> bool {
        *self.up_to_date.borrow()
    }

    fn set_up_to_date(&self, current: bool) {
        self.up_to_date.send_replace(current);
    }
}

/// Reads the control log for as long as the returned task runs,
/// re-subscribing (and re-reading it) after broker trouble.
pub fn subscribe(
    link: BrokerLink,
    names: Names,
    cancellations: Cancellations,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let publisher = Publisher::new(link.clone(), names.clone());
        loop {
            let read = listen(&link, &names, &publisher, &cancellations).await;
            // Whatever ended the reading, new cancellations may be missed
            // from now on: nothing more is harvested or pushed until the
            // log is read again.
            cancellations.set_up_to_date(false);
            if let Err(err) = read {
                warn!(error = %err, "control log unreadable; harvest and delivery wait until it is read again");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

#[derive(Debug, thiserror::Error)]
enum ListenError {
    #[error("broker error: {0}")]
    Broker(#[from] lapin::Error),
    #[error("mark not logged: {0}")]
    Mark(#[from] PublishError),
}

async fn listen(
    link: &BrokerLink,
    names: &Names,
    publisher: &Publisher,
    cancellations: &Cancellations,
) -> Result<(), ListenError> {
    let connection = link.connection().await;
    let channel = connection.create_channel().await?;
    let read = read_log(&channel, names, publisher, cancellations).await;
    // Its consumer reads from the log's start: never leave one behind.
    let _ = channel.close(200, "control log reader done".into()).await;
    read
}

async fn read_log(
    channel: &lapin::Channel,
    names: &Names,
    publisher: &Publisher,
    cancellations: &Cancellations,
) -> Result<(), ListenError> {
    channel
        .basic_qos(LOG_PREFETCH, BasicQosOptions::default())
        .await?;
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-stream-offset".into(),
        AMQPValue::LongString(LongString::from("first")),
    );
    let mut messages = channel
        .basic_consume(
            names.control_log().as_str().into(),
            "control".into(),
            BasicConsumeOptions::default(),
            arguments,
        )
        .await?;
    let listener = Uuid::new_v4();
    let mark = Control {
        v: WireVersion::CURRENT,
        command: ControlCommand::Mark { listener },
    };
    publisher.publish(&publisher.outgoing(&mark)?).await?;
    let mut replayed = 0u64;
    while let Some(delivery) = messages.next().await {
        let delivery = delivery?;
        match decode::<Control>(&delivery.data) {
            Ok(Control {
                command: ControlCommand::Cancel { notification_id },
                ..
            }) => {
                if cancellations.is_up_to_date() {
                    info!(notification.id = %notification_id, "notification cancelled");
                } else {
                    debug!(notification.id = %notification_id, "cancellation read from the log");
                    replayed += 1;
                }
                cancellations.cancel(notification_id);
            }
            Ok(Control {
                command: ControlCommand::Mark { listener: own },
                ..
            }) if own == listener => {
                info!(
                    cancellations = replayed,
                    "control log read; listening for new control messages"
                );
                cancellations.set_up_to_date(true);
            }
            Ok(Control {
                command: ControlCommand::Mark { .. },
                ..
            }) => {}
            Err(err) => warn!(error = %err, "unreadable control message"),
        }
        delivery.ack(BasicAckOptions::default()).await?;
    }
    Ok(())
}

/// Logs a cancellation of `notification_id` for every harvester and
/// dispatcher; resolves once the broker has confirmed it.
pub async fn publish_cancel(publisher: &Publisher, notification_id: Uuid) -> Result<(), PublishError> {
    let message = Control {
        v: WireVersion::CURRENT,
        command: ControlCommand::Cancel { notification_id },
    };
    publisher.publish(&publisher.outgoing(&message)?).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_recent_cancellations() {
        let cancellations = Cancellations::default();
        let first = Uuid::from_u128(1);
        cancellations.cancel(first);
        assert!(cancellations.is_cancelled(first));
        assert!(!cancellations.is_cancelled(Uuid::from_u128(2)));
        for n in 0..REMEMBERED as u128 {
            cancellations.cancel(Uuid::from_u128(100 + n));
        }
        assert!(!cancellations.is_cancelled(first), "the oldest is forgotten");
    }
}
