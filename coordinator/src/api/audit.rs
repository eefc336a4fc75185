//! The audit log over HTTP (`GET /api/v1/audit`, scope `admin`), and the
//! middleware that records every request made with an admin key.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpResponse, get, web};
use chrono::{DateTime, Utc};
use clarion_runtime::db::DbError;
use serde::{Deserialize, Serialize};
use tracing::error;
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use crate::auth::{Caller, Scope};
use crate::error::{ApiError, Problem};
use crate::metrics;
use crate::store::audit::{self, Action, AuditEntry};

/// Records most a page holds.
const MAX_LIMIT: u32 = 1000;
const DEFAULT_LIMIT: u32 = 100;
/// Longest request target recorded for an admin request.
const MAX_TARGET_LEN: usize = 512;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Records per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page; the newest records when absent.
    #[param(pattern = "^[1-9][0-9]{0,17}$")]
    pub cursor: Option<String>,
    /// Only this action: `send`, `cancel`, `replace`, `held.release`, `held.discard`, `admin.request` or `console.session`.
    #[param(
        pattern = "^(send|cancel|replace|held\\.release|held\\.discard|admin\\.request|console\\.session)$"
    )]
    pub action: Option<String>,
}

/// One audit record.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditRecord {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// Fingerprint of the key (12 hex characters), never the key.
    pub key_id: String,
    /// The key's name in the keys file (its fingerprint otherwise).
    pub key_name: String,
    #[schema(example = "send")]
    pub action: String,
    /// A notification id, or the method and path of an admin request.
    pub target: String,
    /// What came of it (replayed; counts; the status code).
    pub detail: String,
}

/// A page of audit records, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPage {
    pub records: Vec<AuditRecord>,
    /// Pass as `cursor` for the next (older) page; null on the last page.
    pub next_cursor: Option<String>,
}

impl From<AuditEntry> for AuditRecord {
    fn from(entry: AuditEntry) -> Self {
        Self {
            id: entry.id,
            at: entry.at,
            key_id: entry.key_id,
            key_name: entry.key_name,
            action: entry.action,
            target: entry.target,
            detail: entry.detail,
        }
    }
}

/// Who did what: every send, cancel, release or discard of held tokens,
/// and every request made with an admin key, newest first.
#[utoipa::path(
    tag = "audit",
    security(("api_key" = [])),
    params(AuditQuery),
    responses(
        (status = 200, body = AuditPage),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key lacks the `admin` scope", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A bad limit, cursor or action", body = Problem, content_type = "application/problem+json"),
        (status = 503, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/v1/audit")]
pub async fn get_audit(
    caller: Caller,
    state: web::Data<AppState>,
    query: web::Query<AuditQuery>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Admin)?;
    let query = query.into_inner();
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::Invalid(format!("`limit` must be 1 to {MAX_LIMIT}")));
    }
    let before = match query.cursor.as_deref() {
        None => None,
        Some(cursor) => Some(
            cursor
                .parse::<i64>()
                .ok()
                .filter(|id| *id > 0)
                .ok_or_else(|| ApiError::Invalid("`cursor` is not one this endpoint gave".into()))?,
        ),
    };
    let action = match query.action.as_deref() {
        None => None,
        Some(name) => Some(Action::parse(name).ok_or_else(|| {
            ApiError::Invalid(
                "`action` must be send, cancel, replace, held.release, held.discard, admin.request or console.session"
                    .into(),
            )
        })?),
    };
    let conn = state.pool.get().await.map_err(DbError::from)?;
    let entries = audit::page(&*conn, limit, before, action).await?;
    let next_cursor = (entries.len() == limit as usize)
        .then(|| entries.last().map(|entry| entry.id.to_string()))
        .flatten();
    Ok(HttpResponse::Ok().json(AuditPage {
        records: entries.into_iter().map(AuditRecord::from).collect(),
        next_cursor,
    }))
}

/// Records every request a key of scope `admin` made (its method and path,
/// and the status answered), once the handler is done.
pub async fn audit_admin_use(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let response = next.call(request).await?;
    let caller = response.request().extensions().get::<Caller>().cloned();
    if let Some(caller) = caller.filter(Caller::is_admin) {
        let request = response.request();
        let mut target = format!("{} {}", request.method(), request.uri());
        if target.len() > MAX_TARGET_LEN {
            let mut end = MAX_TARGET_LEN;
            while !target.is_char_boundary(end) {
                end -= 1;
            }
            target.truncate(end);
        }
        let detail = response.status().as_u16().to_string();
        let recorded = match request.app_data::<web::Data<AppState>>() {
            Some(state) => record_admin_request(state, &caller, &target, &detail).await,
            None => Err(ApiError::Internal("no app state".into())),
        };
        if let Err(err) = recorded {
            error!(key = %caller.key_id, error = %err, "could not record an admin request in the audit log");
            metrics::AUDIT_FAILURES.get().increment(1);
        }
    }
    Ok(response)
}

async fn record_admin_request(
    state: &AppState,
    caller: &Caller,
    target: &str,
    detail: &str,
) -> Result<(), ApiError> {
    let conn = state.pool.get().await.map_err(DbError::from)?;
    audit::record(&*conn, caller, Action::AdminRequest, target, detail).await?;
    Ok(())
}
