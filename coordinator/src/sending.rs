//! Accepting a notification: store it and its plan in one transaction —
//! once per id, however often the same id is sent — and leave publishing
//! to the job relay.
//!
//! 1. The notification is inserted in `accepted` unless its id exists.
//! 2. In a transaction holding the row lock, a notification not planned yet
//!    is planned: its shard jobs go into the outbox (`job_outbox`) and the
//!    row is marked `harvesting`, then the transaction commits. A concurrent
//!    send of the same id waits on the lock and then finds it planned.
//! 3. Only then is the job relay nudged: it publishes committed jobs with
//!    publisher confirms (and would find them anyway on its next round, or
//!    after a restart). So the 202 means the plan is durable, the answer
//!    never waits on the broker, no job is published before its
//!    notification is committed, and a re-sent id is never published twice.
//!
//! The send is recorded in the audit log in that same transaction (a
//! replayed id too, as `replayed`).

use actix::Addr;
use clarion_proto::Notification;
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use tracing::field::Empty;
use tracing::{Instrument, info};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use uuid::Uuid;

use crate::actors::job_relay::{JobRelay, JobsCommitted};
use crate::actors::topic_counter::{PeekTopicCounts, TopicCounter};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::lanes::Lane;
use crate::planning::{AudienceEstimate, plan};
use crate::store::StoreError;
use crate::store::audit::{self, Action};
use crate::store::notifications::{self as store, Status};
use crate::store::outbox;

/// What became of a send request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// Planned now; its jobs are committed to the outbox.
    New { status: Status },
    /// The id was sent before with the same content; nothing was sent again.
    Replay { status: Status },
}

/// Where a send request's plan comes from and where it goes.
pub struct Sending<'a> {
    pub pool: &'a PgPool,
    pub topic_counter: &'a Addr<TopicCounter>,
    pub relay: &'a Addr<JobRelay>,
    pub tokens_per_job: u64,
}

/// Runs inside the notification's span: its trace id is stored with the
/// notification, and the planning span is its child.
pub async fn accept(
    sending: Sending<'_>,
    id: Uuid,
    notification: Notification,
    lane: Lane,
    caller: &Caller,
) -> Result<Accepted, ApiError> {
    let trace_id = trace_id_of(&tracing::Span::current());
    let mut conn = sending.pool.get().await.map_err(DbError::from)?;
    store::insert_if_absent(
        &*conn,
        id,
        &notification,
        lane,
        &caller.key_id,
        trace_id.as_deref(),
    )
    .await?;

    let tx = conn.transaction().await.map_err(StoreError::from)?;
    let stored = store::lock(&tx, id)
        .await?
        .ok_or_else(|| ApiError::Internal(format!("notification {id} vanished while being accepted")))?;
    if stored.notification != notification || stored.lane != lane {
        return Err(ApiError::Conflict(format!(
            "notification {id} was already sent with different content; use a new id"
        )));
    }
    if stored.status != Status::Accepted || stored.jobs_planned > 0 {
        audit::record(&tx, caller, Action::Send, &id.to_string(), "replayed").await?;
        tx.commit().await.map_err(StoreError::from)?;
        return Ok(Accepted::Replay {
            status: stored.status,
        });
    }

    let span = tracing::info_span!(
        "plan notification",
        notification.id = %id,
        jobs = Empty,
        estimated_audience = Empty,
        unknown_topics = Empty,
    );
    let jobs = async {
        let counts = sending
            .topic_counter
            .send(PeekTopicCounts {
                topics: notification.topics.clone(),
            })
            .await
            .map_err(|_| ApiError::Unavailable("the topic counter is not running".into()))?;
        let estimate = AudienceEstimate {
            known: counts.iter().flatten().map(|c| c.total()).sum(),
            unknown_topics: counts.iter().filter(|c| c.is_none()).count(),
        };
        let ranges = plan(estimate, sending.tokens_per_job);
        let jobs = ranges.len() as u32;
        let current = tracing::Span::current();
        current.record("jobs", jobs);
        current.record("estimated_audience", estimate.known);
        current.record("unknown_topics", estimate.unknown_topics);
        let trace_context = clarion_proto::trace_context::inject(&current.context());
        outbox::insert_plan(&tx, id, &ranges).await?;
        let audience_estimate = (estimate.unknown_topics == 0).then_some(estimate.known);
        store::mark_planned(&tx, id, jobs, audience_estimate, &trace_context).await?;
        info!(
            notification.id = %id,
            lane = %lane,
            jobs,
            estimated_audience = estimate.known,
            unknown_topics = estimate.unknown_topics,
            "notification planned"
        );
        Ok::<u32, ApiError>(jobs)
    }
    .instrument(span)
    .await?;
    audit::record(&tx, caller, Action::Send, &id.to_string(), "accepted").await?;
    tx.commit().await.map_err(StoreError::from)?;
    // A nudge, not a hand-over: the relay finds committed jobs by itself, so
    // a full mailbox (nudges already waiting) loses nothing.
    let _ = sending.relay.try_send(JobsCommitted);
    info!(notification.id = %id, jobs, "notification accepted");
    metrics::counter!("clarion_coordinator_jobs_planned_total", "lane" => lane.as_str())
        .increment(u64::from(jobs));
    Ok(Accepted::New {
        status: Status::Harvesting,
    })
}

/// The W3C trace id of `span` (32 hex characters), when it is traced.
fn trace_id_of(span: &tracing::Span) -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}
