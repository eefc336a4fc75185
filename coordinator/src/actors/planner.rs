//! The planner: turns an accepted notification into shard jobs on the
//! harvest exchange, confirmed by the broker.
//!
//! Sizes come from the topic counter's cache (never a row count on the send
//! path); a topic not counted yet still gets a safe plan. Each job is
//! published with publisher confirms and re-sent if unconfirmed; if some are
//! still unconfirmed after that, the send fails loudly and nothing is marked
//! planned, so the same notification id can be sent again.

use actix::prelude::*;
use chrono::{DateTime, Utc};
use clarion_proto::{Names, Notification, ShardJob, WireVersion};
use clarion_runtime::amqp::publisher::{PublishError, Publisher};
use tracing::field::Empty;
use tracing::{Instrument, info};
use uuid::Uuid;

use crate::actors::topic_counter::{PeekTopicCounts, TopicCounter};
use crate::planning::{AudienceEstimate, plan};

/// Mailbox bound: one message per send request in flight; a newsroom sends
/// a handful per minute, so 64 waiting sends means something is stuck.
const MAILBOX_CAPACITY: usize = 64;
/// Attempts to get every job of a plan confirmed.
const PUBLISH_ATTEMPTS: u32 = 3;

/// Plan `notification` and publish its jobs.
#[derive(Message)]
#[rtype(result = "Result<Plan, PlanError>")]
pub struct PlanNotification {
    pub id: Uuid,
    pub notification: Notification,
    pub sent_at: DateTime<Utc>,
    /// The notification's span: planning is its child.
    pub parent: tracing::Span,
}

/// The published plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub jobs: u32,
    pub estimate: AudienceEstimate,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("the topic counter is unavailable")]
    Counter,
    #[error("shard jobs were not confirmed by the broker: {0}")]
    Publish(#[from] PublishError),
}

pub struct Planner {
    topic_counter: Addr<TopicCounter>,
    publisher: Publisher,
    names: Names,
    tokens_per_job: u64,
}

impl Planner {
    pub fn new(
        topic_counter: Addr<TopicCounter>,
        publisher: Publisher,
        names: Names,
        tokens_per_job: u64,
    ) -> Self {
        Self {
            topic_counter,
            publisher,
            names,
            tokens_per_job,
        }
    }
}

impl Actor for Planner {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
    }
}

impl Handler<PlanNotification> for Planner {
    type Result = ResponseFuture<Result<Plan, PlanError>>;

    fn handle(&mut self, msg: PlanNotification, _ctx: &mut Self::Context) -> Self::Result {
        let topic_counter = self.topic_counter.clone();
        let publisher = self.publisher.clone();
        let exchange = self.names.harvest_exchange();
        let tokens_per_job = self.tokens_per_job;
        let span = tracing::info_span!(
            parent: &msg.parent,
            "plan notification",
            notification.id = %msg.id,
            jobs = Empty,
            estimated_audience = Empty,
            unknown_topics = Empty,
        );
        Box::pin(
            async move {
                let counts = topic_counter
                    .send(PeekTopicCounts {
                        topics: msg.notification.topics.clone(),
                    })
                    .await
                    .map_err(|_| PlanError::Counter)?;
                let estimate = AudienceEstimate {
                    known: counts.iter().flatten().map(|c| c.total()).sum(),
                    unknown_topics: counts.iter().filter(|c| c.is_none()).count(),
                };
                let ranges = plan(estimate, tokens_per_job);
                let jobs_planned = ranges.len() as u32;
                let current = tracing::Span::current();
                current.record("jobs", jobs_planned);
                current.record("estimated_audience", estimate.known);
                current.record("unknown_topics", estimate.unknown_topics);
                let publish = tracing::info_span!(
                    "publish shard jobs",
                    otel.kind = "producer",
                    messaging.system = "rabbitmq",
                    messaging.operation.type = "publish",
                    messaging.destination.name = %exchange,
                    messaging.batch.message_count = jobs_planned,
                );
                // Built inside the publish span: each job carries its context.
                let messages = publish.in_scope(|| {
                    ranges
                        .into_iter()
                        .enumerate()
                        .map(|(index, shards)| {
                            publisher.outgoing(&ShardJob {
                                v: WireVersion::CURRENT,
                                notification_id: msg.id,
                                job_index: index as u32,
                                jobs_planned,
                                shards,
                                sent_at: msg.sent_at,
                                notification: msg.notification.clone(),
                            })
                        })
                        .collect::<Result<Vec<_>, PublishError>>()
                })?;
                publisher
                    .publish_all(&messages, PUBLISH_ATTEMPTS)
                    .instrument(publish)
                    .await?;
                info!(
                    notification.id = %msg.id,
                    jobs = jobs_planned,
                    estimated_audience = estimate.known,
                    unknown_topics = estimate.unknown_topics,
                    "shard jobs published"
                );
                Ok(Plan {
                    jobs: jobs_planned,
                    estimate,
                })
            }
            .instrument(span),
        )
    }
}
