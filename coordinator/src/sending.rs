//! Accepting a notification: store it, plan it, publish its jobs — once per
//! id, however often the same id is sent.
//!
//! 1. The notification is inserted in `accepted` unless its id exists.
//! 2. In a transaction holding the row lock, a notification whose jobs are
//!    not published yet is planned and published (confirmed by the broker),
//!    then marked `harvesting`. A concurrent send of the same id waits on the
//!    lock and then finds it planned.
//! 3. If publishing fails, the transaction rolls back and the notification
//!    stays `accepted` and unplanned: sending the same id again retries it.

use actix::Addr;
use chrono::{DateTime, Utc};
use clarion_proto::Notification;
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use tracing::{error, info};
use uuid::Uuid;

use crate::actors::planner::{PlanNotification, Planner};
use crate::error::ApiError;
use crate::store::StoreError;
use crate::store::notifications::{self as store, Status};

/// What became of a send request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// Planned and published now.
    New { status: Status },
    /// The id was sent before with the same content; nothing was sent again.
    Replay { status: Status },
}

/// Runs inside the notification's span: its trace id is stored with the
/// notification, and the planner's spans are its children.
pub async fn accept(
    pool: &PgPool,
    planner: &Addr<Planner>,
    id: Uuid,
    notification: Notification,
    api_key_id: &str,
) -> Result<Accepted, ApiError> {
    let span = tracing::Span::current();
    let trace_id = trace_id_of(&span);
    let mut conn = pool.get().await.map_err(DbError::from)?;
    store::insert_if_absent(&*conn, id, &notification, api_key_id, trace_id.as_deref()).await?;

    let tx = conn.transaction().await.map_err(StoreError::from)?;
    let stored = store::lock(&tx, id)
        .await?
        .ok_or_else(|| ApiError::Internal(format!("notification {id} vanished while being accepted")))?;
    if stored.notification != notification {
        return Err(ApiError::Conflict(format!(
            "notification {id} was already sent with different content; use a new id"
        )));
    }
    if stored.status != Status::Accepted || stored.jobs_planned > 0 {
        return Ok(Accepted::Replay {
            status: stored.status,
        });
    }

    let sent_at: DateTime<Utc> = stored.created_at;
    let plan = planner
        .send(PlanNotification {
            id,
            notification,
            sent_at,
            parent: span,
        })
        .await
        .map_err(|_| ApiError::Unavailable("the planner is not running".into()))?
        .map_err(|err| {
            error!(notification.id = %id, error = %err, "notification not sent");
            ApiError::Unavailable(format!(
                "the notification was stored but its jobs could not be queued ({err}); \
                 send it again with the same id to retry"
            ))
        })?;
    store::mark_planned(&tx, id, plan.jobs).await?;
    tx.commit().await.map_err(StoreError::from)?;
    info!(notification.id = %id, jobs = plan.jobs, "notification accepted");
    metrics::counter!("clarion_coordinator_jobs_planned_total").increment(u64::from(plan.jobs));
    Ok(Accepted::New {
        status: Status::Harvesting,
    })
}

/// The W3C trace id of `span` (32 hex characters), when it is traced.
fn trace_id_of(span: &tracing::Span) -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}
