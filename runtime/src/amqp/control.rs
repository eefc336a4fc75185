//! Control messages (cancellations) fanned out to every harvester and
//! dispatcher. Each process listens on its own exclusive, auto-deleted queue
//! bound to the control exchange and keeps the recent cancellations in
//! memory, so checking whether a notification is cancelled costs a hash
//! lookup, not a database query per batch.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use clarion_proto::codec::decode;
use clarion_proto::{Control, ControlCommand, Names, WireVersion};
use futures::StreamExt;
use lapin::options::{BasicConsumeOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use tracing::{info, warn};
use uuid::Uuid;

use crate::amqp::broker::BrokerLink;
use crate::amqp::publisher::{PublishError, Publisher};

/// Cancellations remembered per process: far more notifications than are
/// ever in flight at once; the oldest are forgotten first.
const REMEMBERED: usize = 10_000;

/// The notifications cancelled recently. Cheap to clone.
#[derive(Clone, Default)]
pub struct Cancellations {
    inner: Arc<RwLock<Remembered>>,
}

#[derive(Default)]
struct Remembered {
    set: HashSet<Uuid>,
    order: VecDeque<Uuid>,
}

impl Cancellations {
    pub fn is_cancelled(&self, id: Uuid) -> bool {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .set
            .contains(&id)
    }

    pub fn cancel(&self, id: Uuid) {
        let mut remembered = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if remembered.set.insert(id) {
            remembered.order.push_back(id);
            if remembered.order.len() > REMEMBERED
                && let Some(oldest) = remembered.order.pop_front()
            {
                remembered.set.remove(&oldest);
            }
        }
    }
}

/// Listens for control messages for as long as the returned task runs,
/// re-subscribing after broker trouble.
pub fn subscribe(
    link: BrokerLink,
    names: Names,
    cancellations: Cancellations,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(err) = listen(&link, &names, &cancellations).await {
                warn!(error = %err, "control subscription lost; resubscribing");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

async fn listen(link: &BrokerLink, names: &Names, cancellations: &Cancellations) -> Result<(), lapin::Error> {
    let connection = link.connection().await;
    let channel = connection.create_channel().await?;
    let options = QueueDeclareOptions {
        exclusive: true,
        auto_delete: true,
        ..QueueDeclareOptions::default()
    };
    let queue = channel
        .queue_declare("".into(), options, FieldTable::default())
        .await?;
    channel
        .queue_bind(
            queue.name().clone(),
            names.control_exchange().as_str().into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let consume = BasicConsumeOptions {
        no_ack: true,
        ..BasicConsumeOptions::default()
    };
    let mut messages = channel
        .basic_consume(
            queue.name().clone(),
            "control".into(),
            consume,
            FieldTable::default(),
        )
        .await?;
    info!("listening for control messages");
    while let Some(delivery) = messages.next().await {
        match decode::<Control>(&delivery?.data) {
            Ok(Control {
                command: ControlCommand::Cancel { notification_id },
                ..
            }) => {
                info!(notification.id = %notification_id, "notification cancelled");
                cancellations.cancel(notification_id);
            }
            Err(err) => warn!(error = %err, "unreadable control message"),
        }
    }
    Ok(())
}

/// Tells every harvester and dispatcher to drop `notification_id`.
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
