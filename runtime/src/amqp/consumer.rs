//! An actor that consumes one queue with manual acks and a bounded prefetch,
//! handing each delivery to a [`DeliveryHandler`] and waiting for it before
//! taking the next.
//!
//! When the channel or connection fails the consumer stream ends and the
//! actor opens a new channel (with backoff) once the broker link is back.
//! Unacked deliveries of the dead channel return to the queue (counted
//! against its delivery limit), so nothing is lost. The actor restarts its
//! channel itself rather than through actix's `Supervisor`, so that
//! [`StopConsuming`] is final: a supervisor would reopen the queue behind it.

use std::time::Duration;

use actix::prelude::*;
use futures::future::LocalBoxFuture;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Consumer};
use tracing::{info, warn};

use crate::amqp::broker::BrokerLink;
use crate::backoff::Backoff;

/// What to consume and how much to prefetch.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    pub queue: String,
    /// Unacked deliveries the broker may push to this consumer ahead of time.
    pub prefetch: u16,
    /// Consumer tag prefix, shown in the broker's management tools.
    pub name: String,
}

/// Processes one delivery; must ack, nack or reject it before resolving.
pub trait DeliveryHandler: Clone + Unpin + 'static {
    fn handle(&self, delivery: Delivery) -> LocalBoxFuture<'static, ()>;
}

pub struct QueueConsumer<H: DeliveryHandler> {
    link: BrokerLink,
    spec: ConsumerSpec,
    handler: H,
    channel: Option<Channel>,
    /// The consumer stream attached to the actor, detached when it fails.
    stream: Option<SpawnHandle>,
    backoff: Backoff,
    stopping: bool,
}

/// Stop taking deliveries: the one being handled finishes, the channel is
/// closed (prefetched, unacked deliveries go back to the queue), and the
/// actor stops for good. Resolves once the channel is closed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopConsuming;

impl<H: DeliveryHandler> QueueConsumer<H> {
    pub fn new(link: BrokerLink, spec: ConsumerSpec, handler: H) -> Self {
        Self {
            link,
            spec,
            handler,
            channel: None,
            stream: None,
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(10)),
            stopping: false,
        }
    }

    /// Opens a channel and starts consuming; on failure tries again later.
    fn open(&mut self, ctx: &mut Context<Self>) {
        let opening = open(self.link.clone(), self.spec.clone());
        ctx.wait(opening.into_actor(self).map(|result, consumer, ctx| {
            if consumer.stopping {
                return;
            }
            match result {
                Ok((channel, stream)) => {
                    info!(queue = %consumer.spec.queue, consumer = %consumer.spec.name, "consuming");
                    consumer.backoff.reset();
                    consumer.channel = Some(channel);
                    consumer.stream = Some(ctx.add_stream(stream));
                }
                Err(err) => {
                    warn!(queue = %consumer.spec.queue, error = %err, "cannot consume");
                    consumer.reopen_later(ctx);
                }
            }
        }));
    }

    fn reopen_later(&mut self, ctx: &mut Context<Self>) {
        self.channel = None;
        if let Some(stream) = self.stream.take() {
            ctx.cancel_future(stream);
        }
        if self.stopping {
            ctx.stop();
            return;
        }
        let delay = self.backoff.next_delay();
        info!(queue = %self.spec.queue, retry_in_ms = delay.as_millis() as u64, "reopening the consumer");
        ctx.run_later(delay, |consumer, ctx| consumer.open(ctx));
    }

    /// Starts `count` consumers on the current arbiter.
    pub fn start_pool(count: usize, link: BrokerLink, spec: ConsumerSpec, handler: H) -> Vec<Addr<Self>> {
        (0..count.max(1))
            .map(|i| {
                let mut spec = spec.clone();
                spec.name = format!("{}-{i}", spec.name);
                Self::new(link.clone(), spec, handler.clone()).start()
            })
            .collect()
    }
}

async fn open(link: BrokerLink, spec: ConsumerSpec) -> Result<(Channel, Consumer), lapin::Error> {
    // The link declared the queue on this connection before handing it out.
    let connection = link.connection().await;
    let channel = connection.create_channel().await?;
    channel
        .basic_qos(spec.prefetch.max(1), BasicQosOptions::default())
        .await?;
    let consumer = channel
        .basic_consume(
            spec.queue.as_str().into(),
            format!("{}-{}", spec.name, std::process::id()).into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok((channel, consumer))
}

impl<H: DeliveryHandler> Actor for QueueConsumer<H> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Nothing but its owner talks to this actor.
        ctx.set_mailbox_capacity(4);
        self.open(ctx);
    }
}

impl<H: DeliveryHandler> Handler<StopConsuming> for QueueConsumer<H> {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _msg: StopConsuming, ctx: &mut Self::Context) -> Self::Result {
        // This runs between deliveries (each one holds the actor with
        // `ctx.wait`). Detach the stream so no prefetched delivery starts
        // while the channel closes: those go back to the queue unhandled.
        self.stopping = true;
        if let Some(stream) = self.stream.take() {
            ctx.cancel_future(stream);
        }
        let channel = self.channel.take();
        let closing = async move {
            if let Some(channel) = channel {
                let _ = channel.close(200, "consumer stopping".into()).await;
            }
        };
        Box::pin(closing.into_actor(self).map(|(), _consumer, ctx| ctx.stop()))
    }
}

impl<H: DeliveryHandler> StreamHandler<Result<Delivery, lapin::Error>> for QueueConsumer<H> {
    fn handle(&mut self, item: Result<Delivery, lapin::Error>, ctx: &mut Self::Context) {
        match item {
            Ok(_) if self.stopping => {
                // Left unacked: the broker requeues it when the channel closes.
            }
            Ok(delivery) => {
                // One delivery at a time: wait for the handler before the next.
                ctx.wait(self.handler.handle(delivery).into_actor(self));
            }
            Err(err) => {
                if !self.stopping {
                    warn!(queue = %self.spec.queue, error = %err, "consumer failed");
                }
                self.reopen_later(ctx);
            }
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        if !self.stopping {
            warn!(queue = %self.spec.queue, "consumer stream ended");
        }
        self.reopen_later(ctx);
    }
}

/// Stops every consumer of `pool` and waits until their channels are
/// closed (each finishes the delivery it is handling first); gives up
/// waiting after `grace`. True when all stopped in time.
pub async fn stop_all<H: DeliveryHandler>(pool: &[Addr<QueueConsumer<H>>], grace: Duration) -> bool {
    stop_recipients(pool.iter().map(|addr| addr.clone().recipient()), grace).await
}

/// [`stop_all`] for consumers of mixed handler types.
pub async fn stop_recipients(
    pool: impl IntoIterator<Item = Recipient<StopConsuming>>,
    grace: Duration,
) -> bool {
    let stops = pool.into_iter().map(|consumer| async move {
        let _ = consumer.send(StopConsuming).await;
    });
    tokio::time::timeout(grace, futures::future::join_all(stops))
        .await
        .is_ok()
}

/// Acknowledges a processed delivery. A failed ack means the channel is gone;
/// the broker then redelivers the message, which consumers tolerate.
pub async fn ack(delivery: &Delivery) {
    if let Err(err) = delivery.ack(BasicAckOptions::default()).await {
        warn!(error = %err, "ack failed; the message will be redelivered");
    }
}

/// Gives a delivery back to its queue to be tried again (this counts against
/// the queue's delivery limit).
pub async fn requeue(delivery: &Delivery) {
    let options = BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    };
    if let Err(err) = delivery.nack(options).await {
        warn!(error = %err, "nack failed; the message will be redelivered");
    }
}

/// Refuses a delivery that can never be processed (unreadable, unknown type):
/// it goes straight to the queue's dead-letter queue.
pub async fn dead_letter(delivery: &Delivery, reason: &str) {
    warn!(reason, routing_key = %delivery.routing_key, "dead-lettering message");
    let options = BasicRejectOptions { requeue: false };
    if let Err(err) = delivery.reject(options).await {
        warn!(error = %err, "reject failed; the message will be redelivered");
    }
}
