//! A supervised actor that consumes one queue with manual acks and a bounded
//! prefetch, handing each delivery to a [`DeliveryHandler`] and waiting for
//! it before taking the next.
//!
//! When the channel or connection fails the consumer stream ends; the actor
//! stops, its supervisor restarts it, and it opens a new channel once the
//! broker link is back. Unacked deliveries of the dead channel return to the
//! queue (counted against its delivery limit), so nothing is lost.

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

use crate::backoff::Backoff;
use crate::broker::BrokerLink;
use crate::topology;
use clarion_proto::Names;

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
    names: Names,
    spec: ConsumerSpec,
    handler: H,
    channel: Option<Channel>,
    backoff: Backoff,
}

impl<H: DeliveryHandler> QueueConsumer<H> {
    pub fn new(link: BrokerLink, names: Names, spec: ConsumerSpec, handler: H) -> Self {
        Self {
            link,
            names,
            spec,
            handler,
            channel: None,
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(10)),
        }
    }

    /// Starts `count` supervised consumers on the current arbiter.
    pub fn start_pool(
        count: usize,
        link: BrokerLink,
        names: Names,
        spec: ConsumerSpec,
        handler: H,
    ) -> Vec<Addr<Self>> {
        (0..count.max(1))
            .map(|i| {
                let mut spec = spec.clone();
                spec.name = format!("{}-{i}", spec.name);
                let consumer = Self::new(link.clone(), names.clone(), spec, handler.clone());
                Supervisor::start(move |_| consumer)
            })
            .collect()
    }
}

async fn open(
    link: BrokerLink,
    names: Names,
    spec: ConsumerSpec,
) -> Result<(Channel, Consumer), lapin::Error> {
    let connection = link.connection().await;
    let channel = connection.create_channel().await?;
    topology::declare(&channel, &names).await?;
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
        // Nothing but the supervisor talks to this actor.
        ctx.set_mailbox_capacity(4);
        let opening = open(self.link.clone(), self.names.clone(), self.spec.clone());
        ctx.wait(opening.into_actor(self).map(|result, consumer, ctx| match result {
            Ok((channel, stream)) => {
                info!(queue = %consumer.spec.queue, consumer = %consumer.spec.name, "consuming");
                consumer.backoff.reset();
                consumer.channel = Some(channel);
                ctx.add_stream(stream);
            }
            Err(err) => {
                let delay = consumer.backoff.next_delay();
                warn!(queue = %consumer.spec.queue, error = %err, retry_in_ms = delay.as_millis() as u64, "cannot consume");
                ctx.run_later(delay, |_, ctx| ctx.stop());
            }
        }));
    }
}

impl<H: DeliveryHandler> Supervised for QueueConsumer<H> {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        self.channel = None;
    }
}

impl<H: DeliveryHandler> StreamHandler<Result<Delivery, lapin::Error>> for QueueConsumer<H> {
    fn handle(&mut self, item: Result<Delivery, lapin::Error>, ctx: &mut Self::Context) {
        match item {
            Ok(delivery) => {
                // One delivery at a time: wait for the handler before the next.
                ctx.wait(self.handler.handle(delivery).into_actor(self));
            }
            Err(err) => {
                warn!(queue = %self.spec.queue, error = %err, "consumer failed; reopening");
                ctx.stop();
            }
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        warn!(queue = %self.spec.queue, "consumer stream ended; reopening");
        ctx.stop();
    }
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
