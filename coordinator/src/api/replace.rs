//! `PUT /api/v1/notifications/{id}`: replacing a scheduled notification —
//! its content, lane and time — while it waits to fire.

use actix_web::{HttpResponse, put, web};
use chrono::Utc;
use clarion_runtime::db::DbError;
use tracing::info;
use uuid::Uuid;

use super::AppState;
use super::notifications::{NotificationStatus, ReadRequest, SendRequest, StatusSnapshots, find, status_of};
use crate::auth::{Caller, Scope};
use crate::error::{ApiError, Problem};
use crate::send::send_at::send_at_within_window;
use crate::store::audit::{self, Action};
use crate::store::notifications::{self as store, Status};
use crate::store::scheduled;

/// Replace a scheduled notification before it fires: the body is a send
/// request (its `id`, if given, must be the path's; `send_at` is
/// required), checked like one. Its sender, creation time and trace stay.
#[utoipa::path(
    tag = "notifications",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "Notification id")),
    request_body = SendRequest,
    responses(
        (status = 200, description = "Replaced; still scheduled, now for the new `send_at`", body = NotificationStatus),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key lacks the `send` scope, or its `lanes` leave out the lane asked for, or its `topics` one of the topics", body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not scheduled any more: it fired, or was cancelled", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body larger than 64 KiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a UUID; the body's `id` is not the path's; `send_at` is missing, not an RFC 3339 time in the future or more than 30 days ahead; or the body breaks a rule of a send request", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable; nothing was replaced", body = Problem, content_type = "application/problem+json"),
    )
)]
#[put("/api/v1/notifications/{id}")]
pub async fn replace_notification(
    caller: Caller,
    state: web::Data<AppState>,
    snapshots: web::Data<StatusSnapshots>,
    id: web::Path<Uuid>,
    body: web::Json<SendRequest>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Send)?;
    let id = id.into_inner();
    let ReadRequest {
        id: body_id,
        notification,
        lane,
        send_at,
    } = body.into_inner().into_notification()?;
    if let Some(body_id) = body_id.filter(|body_id| *body_id != id) {
        return Err(ApiError::Invalid(format!(
            "the body's `id` {body_id} is not the notification replaced, {id}"
        )));
    }
    caller.check_lane(lane)?;
    let notification = super::notifications::admit(&caller, &state, notification)?;
    let send_at = send_at.ok_or_else(|| {
        ApiError::Invalid(
            "`send_at` is required: a replacement stays scheduled (to send now, cancel this one and send anew)"
                .into(),
        )
    })?;
    let send_at = send_at_within_window(&send_at, Utc::now())?;

    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    let stored = store::lock(&tx, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no notification {id}")))?;
    if stored.status != Status::Scheduled {
        return Err(ApiError::Conflict(format!(
            "notification {id} is {}; only a scheduled notification can be replaced",
            stored.status.as_str()
        )));
    }
    scheduled::replace(&tx, id, &notification, lane, send_at).await?;
    let detail = format!("scheduled for {}", send_at.to_rfc3339());
    audit::record(&tx, &caller, Action::Replace, &id.to_string(), &detail).await?;
    tx.commit().await?;
    drop(conn);
    snapshots.forget(id).await;
    info!(notification.id = %id, key = %caller.key_id, send_at = %send_at.to_rfc3339(), "scheduled notification replaced");
    let stored = find(&state, id).await?;
    Ok(HttpResponse::Ok().json(status_of(&state, stored).await?))
}
