//! The job relay: publishes the shard jobs committed to the outbox
//! (`job_outbox`) with publisher confirms, and marks them published.
//!
//! A round claims the oldest waiting jobs (row-locked with `SKIP LOCKED`, so
//! the relays of several coordinator replicas share the work and never
//! publish the same job at once), publishes the first notification's among
//! them and marks them published once all are confirmed, in the claiming
//! transaction — one notification per transaction, so no transaction lasts
//! longer than one notification's publish deadline; the other claimed rows
//! are released by the commit and claimed again next. Rounds run when a send
//! commits a plan (a nudge) and every [`TICK`], so jobs left by a broker
//! outage or a coordinator crash are published as soon as the broker is
//! back. At-least-once: a crash between a confirm and the commit publishes
//! those jobs again; their reports are counted once.
//!
//! A relay whose broker link is down claims nothing (so a replica that can
//! publish is never starved by one that cannot), and [`Stop`] ends
//! it when the coordinator stops.
//!
//! What the relay owns: the round in flight (at most one per process) and
//! the jobs in it awaiting their confirms, shown as
//! `clarion_coordinator_relay_jobs_awaiting_confirm`.

use std::time::Duration;

use actix::prelude::*;
use clarion_proto::{Names, ShardJob, WireVersion};
use clarion_runtime::amqp::publisher::{PublishError, Publisher};
use clarion_runtime::db::DbError;
use clarion_runtime::{BrokerLink, PgPool};
use tracing::{Instrument, info, warn};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::Stop;
use crate::store::StoreError;
use crate::store::outbox::{self, WaitingJob};

/// How often the relay looks for waiting jobs without being nudged: jobs
/// left by a broker outage or a crash wait at most this long once the
/// broker is back.
const TICK: Duration = Duration::from_secs(1);
/// Jobs claimed per transaction: a 10M send plans ~1,000 jobs, so a few
/// transactions publish the largest plan; small enough that one
/// transaction's locks and payloads stay small.
const CLAIM_LIMIT: i64 = 256;
/// Longest a round waits for the broker (connecting included) before it
/// gives up and leaves the rest for the next round.
const PUBLISH_DEADLINE: Duration = Duration::from_secs(10);
/// Mailbox bound: nudges only; one waiting nudge is as good as many, so a
/// full mailbox loses nothing.
const MAILBOX_CAPACITY: usize = 16;

/// A plan was committed: look for waiting jobs now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct JobsCommitted;

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Publish(#[from] PublishError),
}

impl From<DbError> for RelayError {
    fn from(err: DbError) -> Self {
        RelayError::Store(StoreError::Db(err))
    }
}

impl From<tokio_postgres::Error> for RelayError {
    fn from(err: tokio_postgres::Error) -> Self {
        RelayError::Store(err.into())
    }
}

pub struct JobRelay {
    pool: PgPool,
    broker: BrokerLink,
    publisher: Publisher,
    names: Names,
    /// A round is running (at most one per process).
    relaying: bool,
    /// Nudged while a round ran: run another one right after it.
    nudged: bool,
    /// Asked to stop while a round ran: stop when it ends (its confirmed
    /// jobs are marked published first).
    stopping: bool,
}

impl JobRelay {
    pub fn new(pool: PgPool, broker: BrokerLink, names: Names) -> Self {
        Self {
            pool,
            publisher: Publisher::new(broker.clone(), names.clone()),
            broker,
            names,
            relaying: false,
            nudged: false,
            stopping: false,
        }
    }

    /// Starts a round unless one is running (then runs one after it) or
    /// the broker is out of reach: a relay that cannot publish claims
    /// nothing, so it never holds jobs another replica could publish.
    fn relay(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        if self.relaying {
            self.nudged = true;
            return;
        }
        if !self.broker.is_connected() {
            return;
        }
        self.relaying = true;
        self.nudged = false;
        let round = Round {
            pool: self.pool.clone(),
            publisher: self.publisher.clone(),
            exchange: self.names.harvest_exchange(),
        };
        ctx.spawn(round.run_until_empty().into_actor(self).map(|_, relay, ctx| {
            relay.relaying = false;
            if relay.stopping {
                ctx.stop();
            } else if relay.nudged {
                relay.relay(ctx);
            }
        }));
    }
}

impl Actor for JobRelay {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        self.relay(ctx);
        ctx.run_interval(TICK, |relay, ctx| relay.relay(ctx));
    }
}

impl Handler<Stop> for JobRelay {
    type Result = ();

    fn handle(&mut self, _msg: Stop, ctx: &mut Self::Context) {
        // Stopping the context would drop the round in flight, rolling back
        // marks of jobs the broker already confirmed.
        if self.relaying {
            self.stopping = true;
        } else {
            ctx.stop();
        }
    }
}

impl Handler<JobsCommitted> for JobRelay {
    type Result = ();

    fn handle(&mut self, _msg: JobsCommitted, ctx: &mut Self::Context) {
        self.relay(ctx);
    }
}

/// One relay round: claim, publish, mark, until nothing waits.
struct Round {
    pool: PgPool,
    publisher: Publisher,
    exchange: String,
}

impl Round {
    async fn run_until_empty(self) {
        loop {
            match self.claim_and_publish().await {
                Ok(0) => break,
                Ok(_) => continue,
                Err(err) => {
                    warn!(error = %err, "shard jobs wait in the outbox; retrying");
                    metrics::counter!("clarion_coordinator_relay_failures_total").increment(1);
                    break;
                }
            }
        }
        metrics::gauge!("clarion_coordinator_relay_jobs_awaiting_confirm").set(0.0);
        if let Ok(conn) = self.pool.get().await
            && let Ok(waiting) = outbox::waiting_count(&*conn).await
        {
            metrics::gauge!("clarion_coordinator_outbox_waiting_jobs").set(waiting as f64);
        }
    }

    /// Publishes the waiting jobs of the oldest notification (up to
    /// [`CLAIM_LIMIT`]); returns how many (0: nothing waits).
    async fn claim_and_publish(&self) -> Result<usize, RelayError> {
        let mut conn = self.pool.get().await.map_err(DbError::from)?;
        let tx = conn.transaction().await?;
        let jobs = outbox::claim_waiting(&tx, CLAIM_LIMIT).await?;
        if jobs.is_empty() {
            return Ok(0);
        }
        // One notification per transaction (see the module docs).
        let first = jobs
            .chunk_by(|a, b| a.notification_id == b.notification_id)
            .next()
            .unwrap_or(&[]);
        metrics::gauge!("clarion_coordinator_relay_jobs_awaiting_confirm").set(first.len() as f64);
        self.publish(first).await?;
        outbox::mark_published(&tx, first).await?;
        tx.commit().await?;
        metrics::counter!("clarion_coordinator_jobs_published_total").increment(first.len() as u64);
        Ok(first.len())
    }

    /// Publishes one notification's claimed jobs, in a span of its trace.
    async fn publish(&self, jobs: &[WaitingJob]) -> Result<(), RelayError> {
        let Some(first) = jobs.first() else {
            return Ok(());
        };
        let span = tracing::info_span!(
            "publish shard jobs",
            otel.kind = "producer",
            messaging.system = "rabbitmq",
            messaging.operation.type = "publish",
            messaging.destination.name = %self.exchange,
            messaging.batch.message_count = jobs.len(),
            notification.id = %first.notification_id,
        );
        let parent = clarion_proto::trace_context::extract(|name| {
            first
                .trace_context
                .iter()
                .find(|(header, _)| header == name)
                .map(|(_, value)| value.as_str())
        });
        let _ = span.set_parent(parent);
        // Built inside the span: each job carries its context.
        let messages = span.in_scope(|| {
            jobs.iter()
                .map(|job| {
                    self.publisher.outgoing(&ShardJob {
                        v: WireVersion::CURRENT,
                        notification_id: job.notification_id,
                        job_index: job.job_index,
                        jobs_planned: job.jobs_planned,
                        shards: job.shards,
                        sent_at: job.sent_at,
                        notification: job.notification.clone(),
                    })
                })
                .collect::<Result<Vec<_>, PublishError>>()
        })?;
        self.publisher
            .publish_all_within(&messages, PUBLISH_DEADLINE)
            .instrument(span)
            .await?;
        info!(
            notification.id = %first.notification_id,
            jobs = jobs.len(),
            first_job = first.job_index,
            "shard jobs published"
        );
        Ok(())
    }
}
