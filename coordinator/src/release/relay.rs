//! The job relay: releases the shard jobs committed to the outbox
//! (`job_outbox`) in the order they should reach devices, publishes them
//! with publisher confirms, and marks them published.
//!
//! **What is released when** (see [`crate::release`]): a round reads the
//! notifications in flight, measures the delivery rate from their reports,
//! and releases jobs only while the tokens released and not yet reported
//! stay within the budget (a few seconds of delivery per platform), most
//! urgent lane first, then the notification with the least left to
//! release. So the queues after the relay stay shallow and a breaking
//! alert's jobs are published ahead of the rest of a briefing's.
//!
//! Each release first looks without a transaction (one statement) and,
//! when the budget has room, chooses again under the lock below and claims
//! the chosen jobs (row-locked with `SKIP LOCKED`, under a
//! transaction-scoped advisory lock, so the relays of several coordinator
//! replicas never publish the same job nor spend the same budget at once),
//! publishes them and marks them published once all are confirmed, in the
//! claiming transaction — one notification per transaction, so no
//! transaction lasts longer than one publish deadline. Rounds run when a
//! send commits a plan (a nudge), every `POLL` while jobs wait for room,
//! and every `TICK`, so jobs left by a broker outage or a coordinator
//! crash are published as soon as the broker is back. At-least-once: a
//! crash between a confirm and the commit publishes those jobs again; their
//! reports are counted once.
//!
//! A relay whose broker link is down claims nothing (so a replica that can
//! publish is never starved by one that cannot), and [`Stop`] ends
//! it when the coordinator stops.
//!
//! What the relay owns: the round in flight (at most one per process), the
//! jobs in it awaiting their confirms
//! (`clarion_coordinator_relay_jobs_awaiting_confirm`) and the rate meter.

use std::time::{Duration, Instant};

use actix::prelude::*;
use clarion_proto::{Names, Notification, Platform, ShardJob, WireVersion};
use clarion_runtime::amqp::publisher::{PublishError, Publisher};
use clarion_runtime::db::DbError;
use clarion_runtime::{BrokerLink, PgPool};
use tokio_postgres::GenericClient;
use tracing::{Instrument, info, warn};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::metrics;
use crate::release::{
    Budget, InFlight, PerPlatform, RateMeter, Release, Room, next_release, total_outstanding,
};
use crate::stop::Stop;
use crate::store::StoreError;
use crate::store::lanes::Lane;
use crate::store::outbox::{self, WaitingJob};

/// How often the relay looks for waiting jobs without being nudged: jobs
/// left by a broker outage or a crash wait at most this long once the
/// broker is back.
const TICK: Duration = Duration::from_secs(1);
/// How soon the relay looks again while jobs wait for room in the budget:
/// reports free room continuously, and a freed slot should not stay empty
/// for long.
const POLL: Duration = Duration::from_millis(100);
/// Jobs claimed per transaction at most: small enough that one
/// transaction's locks and payloads stay small.
const CLAIM_LIMIT: u32 = 256;
/// Window over which the delivery rate is measured.
const RATE_WINDOW: Duration = Duration::from_secs(3);
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
    scheduling: Scheduling,
    /// Owned by the round in flight while one runs.
    meter: Option<RateMeter>,
    /// A round is running (at most one per process).
    relaying: bool,
    /// Nudged while a round ran: run another one right after it.
    nudged: bool,
    /// Asked to stop while a round ran: stop when it ends (its confirmed
    /// jobs are marked published first).
    stopping: bool,
}

/// How the relay decides what to release.
#[derive(Debug, Clone, Copy)]
pub struct Scheduling {
    pub budget: Budget,
    /// Tokens a job of a notification whose audience was not estimated is
    /// counted as (the planner's tokens per job).
    pub tokens_per_job: u64,
}

impl JobRelay {
    pub fn new(pool: PgPool, broker: BrokerLink, names: Names, scheduling: Scheduling) -> Self {
        Self {
            pool,
            publisher: Publisher::new(broker.clone(), names.clone()),
            broker,
            names,
            scheduling,
            meter: Some(RateMeter::new(RATE_WINDOW)),
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
            scheduling: self.scheduling,
            meter: self.meter.take().unwrap_or_else(|| RateMeter::new(RATE_WINDOW)),
            last_waiting: 0,
        };
        ctx.spawn(round.run().into_actor(self).map(|(end, meter), relay, ctx| {
            relay.relaying = false;
            relay.meter = Some(meter);
            if relay.stopping {
                ctx.stop();
            } else if relay.nudged {
                relay.relay(ctx);
            } else if end == RoundEnd::WaitingForRoom {
                ctx.run_later(POLL, |relay, ctx| relay.relay(ctx));
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

/// Why a round ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RoundEnd {
    /// Nothing waits in the outbox.
    Idle,
    /// Jobs wait for room in the budget (or for another replica's relay).
    WaitingForRoom,
    /// Something failed; the next tick tries again.
    Failed,
}

/// One relay round: choose, claim, publish, mark, until nothing waits or
/// the budget is spent.
struct Round {
    pool: PgPool,
    publisher: Publisher,
    exchange: String,
    scheduling: Scheduling,
    meter: RateMeter,
    /// Jobs waiting at the last look.
    last_waiting: u64,
}

impl Round {
    async fn run(mut self) -> (RoundEnd, RateMeter) {
        let end = loop {
            match self.release_next().await {
                Ok(Some(_)) => continue,
                Ok(None) => break self.waiting_end(),
                Err(err) => {
                    warn!(error = %err, "shard jobs wait in the outbox; retrying");
                    metrics::RELAY_FAILURES.get().increment(1);
                    break RoundEnd::Failed;
                }
            }
        };
        metrics::RELAY_JOBS_AWAITING_CONFIRM.get().set(0.0);
        (end, self.meter)
    }

    /// Whether the last look found jobs waiting.
    fn waiting_end(&self) -> RoundEnd {
        if self.last_waiting > 0 {
            RoundEnd::WaitingForRoom
        } else {
            RoundEnd::Idle
        }
    }

    /// Releases the next jobs the schedule picks; returns how many (`None`:
    /// nothing waits, no room, or another replica's relay is choosing).
    ///
    /// It looks first without a transaction: most rounds of a send find no
    /// room (they run every [`POLL`] while reports trickle in), and such a
    /// look is one statement instead of a locked transaction of three. Only
    /// when something could be released does it take the scheduling lock
    /// and choose again under it, so two replicas never spend one budget.
    async fn release_next(&mut self) -> Result<Option<usize>, RelayError> {
        let mut conn = self.pool.get_owned().await.map_err(DbError::from)?;
        if self.choose(&*conn).await?.is_none() {
            return Ok(None);
        }
        let tx = conn.transaction().await?;
        if !outbox::try_lock_scheduling(&tx).await? {
            self.last_waiting = 1;
            return Ok(None);
        }
        let Some(release) = self.choose(&tx).await? else {
            return Ok(None);
        };
        let jobs = outbox::claim_waiting(&tx, release.notification_id, i64::from(release.jobs)).await?;
        if jobs.is_empty() {
            // Its rows are locked by a relay that does not take the
            // scheduling lock (an older version): try again shortly.
            return Ok(None);
        }
        metrics::RELAY_JOBS_AWAITING_CONFIRM.get().set(jobs.len() as f64);
        let primary_lsn = outbox::primary_lsn(&tx).await?;
        self.publish(&jobs, release.lane, &primary_lsn).await?;
        outbox::mark_published(&tx, &jobs).await?;
        tx.commit().await?;
        metrics::JOBS_PUBLISHED
            .with([release.lane.as_str()])
            .increment(jobs.len() as u64);
        Ok(Some(jobs.len()))
    }

    /// Reads the notifications in flight, measures the rate from them and
    /// picks what the budget has room for.
    async fn choose(&mut self, client: &impl GenericClient) -> Result<Option<Release>, RelayError> {
        let in_flight = outbox::in_flight(client).await?;
        let now = Instant::now();
        let outstanding = total_outstanding(&in_flight, self.scheduling.tokens_per_job);
        self.meter.observe(now, &in_flight, outstanding);
        let rate = self.meter.rate(now);
        let room = Room {
            budget: self.scheduling.budget.tokens(rate),
            stalled: self.meter.stalled(now),
        };
        self.last_waiting = in_flight.iter().map(|n| u64::from(n.jobs_waiting)).sum();
        record_schedule(&in_flight, outstanding, room, rate);
        Ok(next_release(
            &in_flight,
            room,
            self.scheduling.tokens_per_job,
            CLAIM_LIMIT,
        ))
    }

    /// Publishes one notification's claimed jobs, in a span of its trace.
    async fn publish(&self, jobs: &[WaitingJob], lane: Lane, primary_lsn: &str) -> Result<(), RelayError> {
        let Some(first) = jobs.first() else {
            return Ok(());
        };
        let span = tracing::info_span!(
            "publish shard jobs",
            notification.lane = %lane,
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
                        notification: Notification {
                            bulk: lane == Lane::Bulk,
                            ..job.notification.clone()
                        },
                        primary_lsn: Some(primary_lsn.to_owned()),
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
            lane = %lane,
            jobs = jobs.len(),
            first_job = first.job_index,
            "shard jobs published"
        );
        Ok(())
    }
}

/// Shows the schedule as metrics: jobs waiting per lane, and per platform
/// the tokens outstanding, the budget, the measured rate and whether it
/// has stalled.
fn record_schedule(
    in_flight: &[InFlight],
    outstanding: PerPlatform<u64>,
    room: Room,
    rate: PerPlatform<f64>,
) {
    for lane in Lane::ALL {
        let waiting: u64 = in_flight
            .iter()
            .filter(|n| n.lane == lane)
            .map(|n| u64::from(n.jobs_waiting))
            .sum();
        metrics::OUTBOX_WAITING_JOBS
            .with([lane.as_str()])
            .set(waiting as f64);
    }
    for platform in Platform::ALL {
        let (outstanding, budget, rate, stalled) = (
            outstanding[platform],
            room.budget[platform],
            rate[platform],
            room.stalled[platform],
        );
        let platform = platform.as_str();
        metrics::SCHEDULE_OUTSTANDING_TOKENS
            .with([platform])
            .set(outstanding as f64);
        metrics::SCHEDULE_BUDGET_TOKENS
            .with([platform])
            .set(budget as f64);
        metrics::SCHEDULE_RATE.with([platform]).set(rate);
        metrics::SCHEDULE_STALLED
            .with([platform])
            .set(if stalled { 1.0 } else { 0.0 });
    }
}
