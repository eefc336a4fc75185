//! Accepting a notification: store it and its plan in one transaction —
//! once per id, however often the same id is sent — and leave publishing
//! to the job relay.
//!
//! 1. In one transaction, the notification is inserted unless its id
//!    exists, and row-locked: a concurrent send of the same id waits for
//!    this one to commit and then finds it stored (a replay).
//! 2. A send-now not planned yet is planned ([`plan_locked`]): its shard
//!    jobs go into the outbox (`job_outbox`) and the row is marked
//!    `harvesting`, then the transaction commits. A scheduled one (with a
//!    `send_at`) is committed `scheduled` and planned the same way when it
//!    fires ([`super::send_at::fire_next`]).
//! 3. Only then is the job relay nudged: it publishes committed jobs with
//!    publisher confirms (and would find them anyway on its next round, or
//!    after a restart). So the 202 means the plan is durable, the answer
//!    never waits on the broker, no job is published before its
//!    notification is committed, and a re-sent id is never published twice.
//!
//! The send is recorded in the audit log in that same transaction (a
//! replayed id too, as `replayed`; a scheduled one with its time).

use actix::Addr;
use chrono::{DateTime, Utc};
use clarion_proto::Notification;
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use tokio_postgres::Transaction;
use tracing::field::Empty;
use tracing::{Instrument, info};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use uuid::Uuid;

use crate::auth::Caller;
use crate::metrics;
use crate::release::relay::{JobRelay, JobsCommitted};
use crate::send::plan::{AudienceEstimate, plan};
use crate::send::topic_counter::{PeekTopicCounts, TopicCounter};
use crate::store::StoreError;
use crate::store::audit::{self, Action};
use crate::store::lanes::Lane;
use crate::store::notifications::{self as store, NewNotification, Status};
use crate::store::outbox;
use crate::store::registrations::DEFAULT_APP;
use crate::store::topics::count_below;

/// What became of a send request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// Planned now (its jobs are committed to the outbox), or scheduled.
    New { status: Status },
    /// The id was sent before with the same content; nothing was sent again.
    Replay { status: Status },
}

/// Where a plan comes from and where it goes.
#[derive(Clone, Copy)]
pub struct Sending<'a> {
    pub pool: &'a PgPool,
    pub topic_counter: &'a Addr<TopicCounter>,
    pub relay: &'a Addr<JobRelay>,
    pub tokens_per_job: u64,
}

/// Why a notification could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("the topic counter is not running")]
    TopicCounterDown,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<DbError> for PlanError {
    fn from(err: DbError) -> Self {
        PlanError::Store(err.into())
    }
}

impl From<tokio_postgres::Error> for PlanError {
    fn from(err: tokio_postgres::Error) -> Self {
        PlanError::Store(err.into())
    }
}

/// Why a send was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// The id was sent before with other content.
    #[error("notification {0} was already sent with different content; use a new id")]
    Conflict(Uuid),
    /// The row inserted (or found) was gone when read back under its lock.
    #[error("notification {0} vanished while being accepted")]
    Vanished(Uuid),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<DbError> for AcceptError {
    fn from(err: DbError) -> Self {
        AcceptError::Store(err.into())
    }
}

/// Runs inside the notification's span: its trace id is stored with the
/// notification, and the planning span is its child. `send_at` schedules
/// it instead of planning it now.
pub async fn accept(
    sending: Sending<'_>,
    id: Uuid,
    notification: Notification,
    lane: Lane,
    send_at: Option<DateTime<Utc>>,
    caller: &Caller,
) -> Result<Accepted, AcceptError> {
    let span = tracing::Span::current();
    let trace_id = trace_id_of(&span);
    // A scheduled send keeps its trace headers: its firing joins this trace.
    let trace_context = send_at.map(|_| clarion_proto::trace_context::inject(&span.context()));
    let mut conn = sending.pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await.map_err(StoreError::from)?;
    let inserted = store::insert_if_absent(
        &tx,
        &NewNotification {
            id,
            notification: &notification,
            lane,
            send_at,
            api_key_id: &caller.key_id,
            trace_id: trace_id.as_deref(),
            trace_context: trace_context.as_deref(),
        },
    )
    .await?;
    let stored = store::lock(&tx, id).await?.ok_or(AcceptError::Vanished(id))?;
    if stored.notification != notification || stored.lane != lane || stored.send_at != send_at {
        return Err(AcceptError::Conflict(id));
    }
    // Not stored by this request, and planned, scheduled or finished.
    // (An `accepted` row left unplanned by an older version is planned.)
    if !inserted && (stored.status != Status::Accepted || stored.jobs_planned > 0) {
        audit::record(&tx, caller, Action::Send, &id.to_string(), "replayed").await?;
        tx.commit().await.map_err(StoreError::from)?;
        return Ok(Accepted::Replay {
            status: stored.status,
        });
    }
    if let Some(send_at) = send_at {
        let detail = format!("scheduled for {}", send_at.to_rfc3339());
        audit::record(&tx, caller, Action::Send, &id.to_string(), &detail).await?;
        tx.commit().await.map_err(StoreError::from)?;
        info!(notification.id = %id, send_at = %send_at.to_rfc3339(), "notification scheduled");
        metrics::NOTIFICATIONS_SCHEDULED.get().increment(1);
        return Ok(Accepted::New {
            status: Status::Scheduled,
        });
    }
    let jobs = plan_locked(sending, &tx, id, &notification, lane).await?;
    audit::record(&tx, caller, Action::Send, &id.to_string(), "accepted").await?;
    tx.commit().await.map_err(StoreError::from)?;
    committed(sending, lane, jobs);
    info!(notification.id = %id, jobs, "notification accepted");
    Ok(Accepted::New {
        status: Status::Harvesting,
    })
}

/// Accepts a notification the coordinator sends itself (a Live
/// Activity's start push) inside `tx`, as `author`'s: inserted unless its
/// id exists, then planned and audited. Returns its jobs when inserted now
/// (report them with [`committed`] after `tx` commits); `None` for an id
/// stored before, which sends nothing again.
pub async fn accept_within(
    sending: Sending<'_>,
    tx: &Transaction<'_>,
    id: Uuid,
    notification: &Notification,
    lane: Lane,
    author: &impl audit::Author,
) -> Result<Option<u32>, AcceptError> {
    let trace_id = trace_id_of(&tracing::Span::current());
    let new = NewNotification {
        id,
        notification,
        lane,
        send_at: None,
        api_key_id: author.key_id(),
        trace_id: trace_id.as_deref(),
        trace_context: None,
    };
    if !store::insert_if_absent(tx, &new).await? {
        return Ok(None);
    }
    store::lock(tx, id).await?.ok_or(AcceptError::Vanished(id))?;
    let jobs = plan_locked(sending, tx, id, notification, lane).await?;
    audit::record(tx, author, Action::Send, &id.to_string(), "accepted").await?;
    Ok(Some(jobs))
}

/// Plans a notification row-locked by `tx`, in a "plan notification" span
/// (a child of the caller's): estimates its audience from the cached topic
/// counts, puts its shard jobs in the outbox and marks it planned — all in
/// `tx`, which the caller commits and then reports with [`committed`].
/// Returns the number of jobs.
pub async fn plan_locked(
    sending: Sending<'_>,
    tx: &Transaction<'_>,
    id: Uuid,
    notification: &Notification,
    lane: Lane,
) -> Result<u32, PlanError> {
    let span = tracing::info_span!(
        "plan notification",
        notification.id = %id,
        jobs = Empty,
        estimated_audience = Empty,
        unknown_topics = Empty,
    );
    async {
        let estimate = estimate_audience(sending, tx, notification).await?;
        let ranges = plan(estimate, sending.tokens_per_job);
        let jobs = ranges.len() as u32;
        let current = tracing::Span::current();
        current.record("jobs", jobs);
        current.record("estimated_audience", estimate.known);
        current.record("unknown_topics", estimate.unknown_topics);
        let trace_context = clarion_proto::trace_context::inject(&current.context());
        outbox::insert_plan(tx, id, &ranges).await?;
        let audience_estimate = (estimate.unknown_topics == 0).then_some(estimate.known);
        store::mark_planned(tx, id, jobs, audience_estimate, &trace_context).await?;
        info!(
            notification.id = %id,
            lane = %lane,
            jobs,
            estimated_audience = estimate.known,
            unknown_topics = estimate.unknown_topics,
            "notification planned"
        );
        Ok(jobs)
    }
    .instrument(span)
    .await
}

/// Jobs' worth of tokens planning counts of a topic the topic counter has
/// no count of: 80,000 index entries at the default 10,000 tokens a job,
/// a few milliseconds once per cold topic (then the counter has it).
const COUNTED_JOBS: u64 = 8;

/// What planning knows of the audience: the topic counter's cached counts
/// (of the default app: the counter counts that one), and for a topic it
/// has none of — or of another app — a count in `tx` when the topic is
/// small (below [`COUNTED_JOBS`] jobs' worth, read from the index at that
/// cost at most). Only a large topic not counted yet is left unknown
/// (planned with [`crate::planning::UNKNOWN_AUDIENCE_JOBS`] jobs), so a
/// topic of one device is one job, not 64.
async fn estimate_audience(
    sending: Sending<'_>,
    tx: &Transaction<'_>,
    notification: &Notification,
) -> Result<AudienceEstimate, PlanError> {
    let app = notification.app.as_str();
    let cached = if app == DEFAULT_APP {
        sending
            .topic_counter
            .send(PeekTopicCounts {
                topics: notification.topics.clone(),
            })
            .await
            .map_err(|_| PlanError::TopicCounterDown)?
    } else {
        vec![None; notification.topics.len()]
    };
    let mut estimate = AudienceEstimate::default();
    for (topic, counts) in notification.topics.iter().zip(cached) {
        let known = match counts {
            Some(counts) => Some(counts.total()),
            None => {
                count_below(
                    tx,
                    app,
                    topic,
                    sending.tokens_per_job.saturating_mul(COUNTED_JOBS),
                )
                .await?
            }
        };
        match known {
            Some(devices) => estimate.known += devices,
            None => estimate.unknown_topics += 1,
        }
    }
    Ok(estimate)
}

/// After a plan committed: nudges the job relay and counts the jobs.
pub fn committed(sending: Sending<'_>, lane: Lane, jobs: u32) {
    // A nudge, not a hand-over: the relay finds committed jobs by itself, so
    // a full mailbox (nudges already waiting) loses nothing.
    let _ = sending.relay.try_send(JobsCommitted);
    metrics::JOBS_PLANNED
        .with([lane.as_str()])
        .increment(u64::from(jobs));
}

/// The W3C trace id of `span` (32 hex characters), when it is traced.
pub fn trace_id_of(span: &tracing::Span) -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}
