//! Held deletions (scope `admin`): the tokens of a notification's segments
//! that tripped the safety valve, kept until an operator has checked the
//! configuration and then released (their registrations deleted, as
//! cleanup would have) or discarded (the registrations kept). Both are
//! audited and idempotent.

use actix_web::{HttpResponse, get, post, web};
use clarion_proto::platform::{segment_named, segments};
use clarion_runtime::db::DbError;
use serde::{Deserialize, Serialize};
use tracing::{Instrument, info};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::AppState;
use super::notifications::find;
use crate::auth::{Caller, Scope};
use crate::error::{ApiError, Problem};
use crate::progress::held::{Settled, Verdict, settle_held};
use crate::store::audit::{self, Action};
use crate::store::held;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SegmentFilter {
    // Its description and pattern (the segments, from
    // `clarion_proto::platform::segments`) are stated by `api/limits.rs`.
    pub segment: Option<String>,
}

impl SegmentFilter {
    /// The filter, or 422 for a segment that does not exist (a typo must
    /// not release or discard nothing and say 200).
    fn validated(self) -> Result<Option<String>, ApiError> {
        match self.segment {
            Some(segment) if segment_named(&segment).is_none() => Err(ApiError::Invalid(format!(
                "unknown segment {:?}: expected one of {}",
                segment.chars().take(64).collect::<String>(),
                segments().collect::<Vec<_>>().join(", ")
            ))),
            other => Ok(other),
        }
    }
}

/// Held tokens of one segment.
#[derive(Debug, Serialize, ToSchema)]
pub struct HeldSegment {
    // Its example is stated by `api/limits.rs`.
    pub segment: String,
    /// Answered gone (uninstalled).
    pub gone: u64,
    /// Refused as invalid.
    pub invalid: u64,
    pub total: u64,
}

/// A notification's held tokens.
#[derive(Debug, Serialize, ToSchema)]
pub struct HeldTokens {
    pub id: Uuid,
    /// False until the notification is complete: until then every gone or
    /// invalid token is held for the safety valve, and none can be
    /// released or discarded.
    pub decided: bool,
    /// The segments whose tokens the valve kept.
    pub suspect_segments: Vec<String>,
    pub segments: Vec<HeldSegment>,
    pub total: u64,
}

/// What a release or discard did.
#[derive(Debug, Serialize, ToSchema)]
pub struct HeldSettled {
    pub id: Uuid,
    /// The segment filter, when one was given.
    pub segment: Option<String>,
    /// Held tokens removed now (0 when run again).
    pub tokens: u64,
    /// Registrations deleted now (always 0 for a discard; registrations
    /// renewed since the send are never deleted).
    pub registrations_deleted: u64,
}

/// Held tokens per segment.
#[utoipa::path(
    tag = "held",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "Notification id")),
    responses(
        (status = 200, body = HeldTokens),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key lacks the `admin` scope", body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a UUID", body = Problem, content_type = "application/problem+json"),
        (status = 503, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/v1/notifications/{id}/held")]
pub async fn get_held(
    caller: Caller,
    state: web::Data<AppState>,
    id: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Admin)?;
    let id = id.into_inner();
    let stored = find(&state, id).await?;
    let conn = state.pool.get().await.map_err(DbError::from)?;
    let segments: Vec<HeldSegment> = held::counts(&*conn, id)
        .await?
        .into_iter()
        .map(|count| HeldSegment {
            total: count.gone + count.invalid,
            segment: count.segment,
            gone: count.gone,
            invalid: count.invalid,
        })
        .collect();
    Ok(HttpResponse::Ok().json(HeldTokens {
        id,
        decided: stored.invalid_decision.is_some(),
        suspect_segments: stored.suspect_segments,
        total: segments.iter().map(|segment| segment.total).sum(),
        segments,
    }))
}

/// Release held tokens: delete their registrations, in bounded batches,
/// exactly as token cleanup would have. Audited; running it again deletes
/// nothing more.
#[utoipa::path(
    tag = "held",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "Notification id"), SegmentFilter),
    responses(
        (status = 200, body = HeldSettled),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key lacks the `admin` scope", body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The notification is not complete: its safety valve has not judged yet", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a UUID, or a bad segment", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable; what was released stays released, retry for the rest", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/v1/notifications/{id}/held/release")]
pub async fn release_held(
    caller: Caller,
    state: web::Data<AppState>,
    id: web::Path<Uuid>,
    filter: web::Query<SegmentFilter>,
) -> Result<HttpResponse, ApiError> {
    settle(
        caller,
        state,
        id.into_inner(),
        filter.into_inner(),
        Verdict::Release,
    )
    .await
}

/// Discard held tokens: drop them and keep their registrations. Audited;
/// running it again changes nothing.
#[utoipa::path(
    tag = "held",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "Notification id"), SegmentFilter),
    responses(
        (status = 200, body = HeldSettled),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key lacks the `admin` scope", body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The notification is not complete: its safety valve has not judged yet", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a UUID, or a bad segment", body = Problem, content_type = "application/problem+json"),
        (status = 503, body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/v1/notifications/{id}/held/discard")]
pub async fn discard_held(
    caller: Caller,
    state: web::Data<AppState>,
    id: web::Path<Uuid>,
    filter: web::Query<SegmentFilter>,
) -> Result<HttpResponse, ApiError> {
    settle(
        caller,
        state,
        id.into_inner(),
        filter.into_inner(),
        Verdict::Discard,
    )
    .await
}

async fn settle(
    caller: Caller,
    state: web::Data<AppState>,
    id: Uuid,
    filter: SegmentFilter,
    verdict: Verdict,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Admin)?;
    let segment = filter.validated()?;
    let (action, name) = match verdict {
        Verdict::Release => (Action::HeldRelease, "release"),
        Verdict::Discard => (Action::HeldDiscard, "discard"),
    };
    let span = tracing::info_span!("settle held tokens", notification.id = %id, verdict = name);
    let settled = settle_held(&state.pool, id, segment.as_deref(), verdict)
        .instrument(span)
        .await?;
    let (tokens, registrations_deleted) = match settled {
        Settled::UnknownNotification => return Err(ApiError::NotFound(format!("no notification {id}"))),
        Settled::Undecided => {
            return Err(ApiError::Conflict(format!(
                "notification {id} is not complete: its safety valve has not judged its tokens yet"
            )));
        }
        Settled::Done {
            tokens,
            registrations_deleted,
        } => (tokens, registrations_deleted),
    };
    let detail = format!(
        "segment={} tokens={tokens} registrations_deleted={registrations_deleted}",
        segment.as_deref().unwrap_or("all")
    );
    let conn = state.pool.get().await.map_err(DbError::from)?;
    audit::record(&*conn, &caller, action, &id.to_string(), &detail).await?;
    info!(notification.id = %id, key = %caller.key_id, verdict = name, tokens, registrations_deleted, "held tokens settled");
    Ok(HttpResponse::Ok().json(HeldSettled {
        id,
        segment,
        tokens,
        registrations_deleted,
    }))
}
