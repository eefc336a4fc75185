//! Publishing with publisher confirms over a channel that reopens itself.
//!
//! Every message is published `mandatory`, so a message no queue would take
//! comes back as an error instead of vanishing; a message counts as sent only
//! once the broker has confirmed it.
//!
//! A channel that had a message refused (nack) is put out of use: when the
//! node leading a quorum queue dies, a channel that began publishing to the
//! queue before a new leader was known can go on refusing every message to
//! it (RabbitMQ 3.10, seen in the broker-cluster test), while a new channel
//! asks for the leader afresh.

use std::sync::Arc;
use std::time::Duration;

use clarion_proto::codec::encode;
use clarion_proto::{Names, WireMessage};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{BasicProperties, Channel};
use lapin::{Confirmation, PublisherConfirm};
use tokio::sync::Mutex;
use tracing::warn;

use crate::amqp::broker::BrokerLink;
use crate::amqp::message::properties;
use crate::backoff::Backoff;

/// A message ready to go.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub exchange: String,
    pub routing_key: String,
    pub body: Vec<u8>,
    pub properties: BasicProperties,
}

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("broker error: {0}")]
    Broker(#[from] lapin::Error),
    #[error("the broker refused the message (nack)")]
    Nacked,
    #[error("message could not be encoded: {0}")]
    Encode(String),
    #[error("no queue takes messages for {exchange} / {routing_key}")]
    Unroutable { exchange: String, routing_key: String },
    #[error("messages not confirmed within {0:?}")]
    Deadline(Duration),
    #[error("{failed} of {total} messages still unconfirmed after {attempts} attempts; last error: {last}")]
    GaveUp {
        failed: usize,
        total: usize,
        attempts: u32,
        last: Box<PublishError>,
    },
}

/// Attempts of one round of [`Publisher::publish_all_within`].
const ROUND_ATTEMPTS: u32 = 3;
/// Pause between rounds of [`Publisher::publish_all_within`].
const ROUND_PAUSE: Duration = Duration::from_millis(500);
/// How long a retired channel stays open for the confirms of the messages
/// already sent on it (callers wait 10 s at most for a confirm).
const RETIRED_CHANNEL_GRACE: Duration = Duration::from_secs(15);

/// The channel clones of a publisher share.
type ChannelSlot = Arc<Mutex<Option<Channel>>>;

/// Cheap to clone; clones share one confirm-mode channel.
#[derive(Clone)]
pub struct Publisher {
    link: BrokerLink,
    names: Names,
    channel: ChannelSlot,
}

/// A published message whose confirm has not arrived yet.
#[must_use = "a message is only sent once its confirm has been awaited"]
pub struct PendingConfirm {
    confirm: PublisherConfirm,
    exchange: String,
    routing_key: String,
    /// The channel it went out on, and the slot to retire it from.
    channel: Channel,
    slot: ChannelSlot,
}

impl PendingConfirm {
    /// Resolves once the broker has taken responsibility for the message.
    pub async fn confirmed(self) -> Result<(), PublishError> {
        match self.confirm.await? {
            Confirmation::Ack(None) | Confirmation::NotRequested => Ok(()),
            Confirmation::Ack(Some(_)) => Err(PublishError::Unroutable {
                exchange: self.exchange,
                routing_key: self.routing_key,
            }),
            Confirmation::Nack(_) => {
                retire(&self.slot, &self.channel).await;
                Err(PublishError::Nacked)
            }
        }
    }
}

/// Takes `channel` out of `slot` (unless another nack did already), so the
/// next message opens a new one, and closes it after
/// [`RETIRED_CHANNEL_GRACE`].
async fn retire(slot: &ChannelSlot, channel: &Channel) {
    let mut current = slot.lock().await;
    if current.as_ref().is_some_and(|c| c.id() == channel.id()) {
        *current = None;
        warn!(
            channel = channel.id(),
            "a publish was refused; later ones go on a new channel"
        );
        let channel = channel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(RETIRED_CHANNEL_GRACE).await;
            let _ = channel.close(200, "retired after a nack".into()).await;
        });
    }
}

impl Publisher {
    pub fn new(link: BrokerLink, names: Names) -> Self {
        Self {
            link,
            names,
            channel: Arc::default(),
        }
    }

    /// `message` ready to publish: encoded, addressed in this publisher's
    /// namespace, typed, tagged with its notification and carrying the
    /// current span's trace context.
    pub fn outgoing<M: WireMessage>(&self, message: &M) -> Result<Outgoing, PublishError> {
        Ok(Outgoing {
            exchange: M::exchange(&self.names),
            routing_key: message.routing_key().to_owned(),
            body: encode(message).map_err(|err| PublishError::Encode(err.to_string()))?,
            properties: properties(M::TYPE, message.notification_id()),
        })
    }

    /// The open confirm-mode channel, opening a new one when there is none
    /// or the last one closed (the link declared the topology on its
    /// connection).
    async fn channel(&self) -> Result<Channel, lapin::Error> {
        let mut slot = self.channel.lock().await;
        if let Some(channel) = slot.as_ref()
            && channel.status().connected()
        {
            return Ok(channel.clone());
        }
        let connection = self.link.connection().await;
        let channel = connection.create_channel().await?;
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        *slot = Some(channel.clone());
        Ok(channel)
    }

    /// Sends `message`; await the returned confirm before counting it sent.
    pub async fn send(&self, message: &Outgoing) -> Result<PendingConfirm, PublishError> {
        let channel = self.channel().await?;
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let confirm = channel
            .basic_publish(
                message.exchange.as_str().into(),
                message.routing_key.as_str().into(),
                options,
                &message.body,
                message.properties.clone(),
            )
            .await?;
        Ok(PendingConfirm {
            confirm,
            exchange: message.exchange.clone(),
            routing_key: message.routing_key.clone(),
            channel,
            slot: self.channel.clone(),
        })
    }

    /// Sends one message and waits for its confirm.
    pub async fn publish(&self, message: &Outgoing) -> Result<(), PublishError> {
        self.send(message).await?.confirmed().await
    }

    /// Publishes every message (pipelined), re-sending the unconfirmed ones
    /// up to `attempts` times in all with backoff; fails only when some are
    /// still unconfirmed after that.
    pub async fn publish_all(&self, messages: &[Outgoing], attempts: u32) -> Result<(), PublishError> {
        let mut pending: Vec<usize> = (0..messages.len()).collect();
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let mut last = None;
        for attempt in 1..=attempts.max(1) {
            let mut sent = Vec::with_capacity(pending.len());
            let mut failed = Vec::new();
            for &index in &pending {
                match self.send(&messages[index]).await {
                    Ok(confirm) => sent.push((index, confirm)),
                    Err(err) => {
                        failed.push(index);
                        last = Some(err);
                    }
                }
            }
            for (index, confirm) in sent {
                if let Err(err) = confirm.confirmed().await {
                    failed.push(index);
                    last = Some(err);
                }
            }
            if failed.is_empty() {
                return Ok(());
            }
            warn!(
                attempt,
                unconfirmed = failed.len(),
                error = %last.as_ref().map_or_else(String::new, ToString::to_string),
                "publishes not confirmed; retrying"
            );
            pending = failed;
            tokio::time::sleep(backoff.next_delay()).await;
        }
        Err(PublishError::GaveUp {
            failed: pending.len(),
            total: messages.len(),
            attempts,
            last: Box::new(last.unwrap_or(PublishError::Nacked)),
        })
    }

    /// [`Self::publish_all`], tried again while the broker is away, for at
    /// most `patience` in all (waiting for the broker link included): the
    /// deadline for callers that would rather wait out a broker restart
    /// than give their work back.
    pub async fn publish_all_within(
        &self,
        messages: &[Outgoing],
        patience: Duration,
    ) -> Result<(), PublishError> {
        let deadline = tokio::time::Instant::now() + patience;
        let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
        loop {
            let err = match tokio::time::timeout(left(), self.publish_all(messages, ROUND_ATTEMPTS)).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(err)) => err,
                Err(_) => return Err(PublishError::Deadline(patience)),
            };
            warn!(error = %err, "publishes not confirmed yet; trying again while the broker is away");
            tokio::time::sleep(ROUND_PAUSE.min(left())).await;
            if tokio::time::timeout(left(), self.link.connection())
                .await
                .is_err()
                || left().is_zero()
            {
                return Err(err);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
    use lapin::types::{AMQPValue, FieldTable};

    use super::*;
    use crate::tls::Trust;

    /// The id of the channel the publisher would use now, if any.
    async fn current_channel(publisher: &Publisher) -> Option<u16> {
        publisher.channel.lock().await.as_ref().map(Channel::id)
    }

    #[tokio::test]
    async fn a_nacked_message_moves_the_publisher_to_a_new_channel() {
        let url = std::env::var("CLARION_TEST_AMQP_URL")
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
        let trust = Trust::load(&crate::settings::TlsSettings::default()).unwrap();
        let names = Names::new(format!("test-{}", uuid::Uuid::new_v4().simple()));
        let link = BrokerLink::spawn(url, trust, "publisher-test".into(), names.clone());
        let publisher = Publisher::new(link.clone(), names.clone());
        // A queue that refuses every message: full at length 0.
        let full = format!("{}.full", names.harvest_queue());
        let setup = link.connection().await.create_channel().await.unwrap();
        let mut arguments = FieldTable::default();
        arguments.insert("x-max-length".into(), AMQPValue::LongInt(0));
        arguments.insert(
            "x-overflow".into(),
            AMQPValue::LongString("reject-publish".into()),
        );
        let options = QueueDeclareOptions {
            auto_delete: true,
            ..QueueDeclareOptions::default()
        };
        setup
            .queue_declare(full.as_str().into(), options, arguments)
            .await
            .unwrap();
        let refused = Outgoing {
            exchange: String::new(),
            routing_key: full.clone(),
            body: b"refused".to_vec(),
            properties: BasicProperties::default(),
        };

        let first_try = publisher.send(&refused).await.unwrap();
        let first = current_channel(&publisher).await.expect("a channel");
        let error = first_try.confirmed().await.unwrap_err();
        assert!(matches!(error, PublishError::Nacked), "{error}");
        assert_eq!(
            current_channel(&publisher).await,
            None,
            "the refusing channel is retired"
        );
        let again = publisher.send(&refused).await.unwrap();
        let second = current_channel(&publisher).await.expect("a new channel");
        assert_ne!(first, second);
        assert!(matches!(again.confirmed().await, Err(PublishError::Nacked)));

        let _ = setup
            .queue_delete(full.as_str().into(), QueueDeleteOptions::default())
            .await;
        let _ = crate::amqp::topology::delete(&setup, &names).await;
    }
}
