//! `POST /api/v1/receipts`: apps say which notifications their devices
//! received and opened. The 202 is given only once the counted receipts
//! are committed; a replay is a duplicate, so apps retry safely.

use std::sync::atomic::Ordering;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, post, web};
use chrono::Utc;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tracing::Span;
use utoipa::ToSchema;

use super::ReceiptsState;
use super::body::{self, BodyError};
use super::observe;
use super::write::ReceiptWrite;
use crate::auth::{Caller, Scope};
use crate::error::{ApiError, Problem};
use crate::group_commit::WriteError;

/// Largest body taken: 500 receipts with the longest FCM tokens and a time
/// each fit in well under half of it.
pub const RECEIPTS_BODY_LIMIT: usize = 512 * 1024;

/// One device's word about one notification.
#[derive(Debug, Deserialize, ToSchema)]
#[allow(dead_code)]
#[serde(deny_unknown_fields)]
pub struct ReceiptItem {
    /// The `notification_id` the push carried.
    #[schema(example = "6f1c2a9e-1d2b-4c3d-9e8f-0a1b2c3d4e5f")]
    notification_id: uuid::Uuid,
    /// The device's token, as registered.
    token: String,
    /// `received` (shown to the user or delivered to the app) or `opened`
    /// (the user tapped it; counts as received too).
    #[schema(example = "received")]
    event: ReceiptEvent,
    /// When it happened on the device (RFC 3339); clamped to between the
    /// send and the arrival of the request. Absent: the arrival.
    #[schema(value_type = Option<String>, format = DateTime)]
    at: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReceiptEvent {
    Received,
    Opened,
}

/// Receipts a device (or an app's backend) sends, 1 to 500.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct ReceiptsRequest {
    #[schema(min_items = 1, max_items = 500)]
    receipts: Vec<ReceiptItem>,
}

/// What became of the receipts.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReceiptsAccepted {
    /// Counted now (durably stored).
    pub accepted: u64,
    /// Already counted before (a retry, or twice in this request).
    pub duplicates: u64,
    /// Not counted and never will be: unknown notification (or a dry run,
    /// or one whose details are past the retention, or of an app the key's
    /// `apps` rule leaves out), a device outside its audience, or a
    /// registration without `receipts: true`. Do not retry.
    pub ignored: u64,
}

/// Report what devices received and opened (scope `register`).
#[utoipa::path(
    tag = "receipts",
    security(("api_key" = [])),
    request_body = ReceiptsRequest,
    responses(
        (status = 202, description = "Recorded: the counted receipts are committed", body = ReceiptsAccepted),
        (status = 400, description = "Not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key lacks the `register` scope", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "More than 500 receipts, or a body over 512 KiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is missing or wrong (the detail names it, e.g. `receipts[3].event`)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable or the queue of receipt writes is full: nothing of this request is acknowledged; retry after `Retry-After` (retries are idempotent: a receipt counted meanwhile comes back as a duplicate)", body = Problem, content_type = "application/problem+json", headers(("Retry-After" = u64))),
    )
)]
#[post("/api/v1/receipts")]
#[tracing::instrument(
    name = "receipts",
    skip_all,
    fields(receipts = tracing::field::Empty, accepted = tracing::field::Empty, duplicates = tracing::field::Empty, ignored = tracing::field::Empty)
)]
pub async fn post_receipts(
    caller: Caller,
    state: web::Data<ReceiptsState>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Register)?;
    // Full already: refused before the body is read.
    state.writes.check_room().inspect_err(|_| observe::shed())?;
    let is_json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .map(|essence| essence.trim().to_ascii_lowercase())
        .is_some_and(|essence| essence == "application/json" || essence.ends_with("+json"));
    if !is_json {
        return Err(ApiError::UnsupportedMediaType(
            "send the body as `Content-Type: application/json`".into(),
        ));
    }
    let bytes = read_body(payload).await?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|err| ApiError::Malformed(format!("invalid JSON: {err}")))?;
    let receipts = body::parse(&value).map_err(|err| match err {
        BodyError::TooMany(_) => ApiError::PayloadTooLarge(err.to_string()),
        BodyError::Field { .. } => ApiError::Invalid(err.to_string()),
    })?;
    Span::current().record("receipts", receipts.len());
    let now = Utc::now();
    let cutoff = state
        .retention
        .and_then(|keep| chrono::Duration::from_std(keep).ok())
        .map(|keep| now - keep);
    let write = ReceiptWrite {
        receipts,
        now,
        cutoff,
        caller,
        slot_offset: state.slot_offset,
        arrival: state.arrivals.fetch_add(1, Ordering::Relaxed),
    };
    let outcome = state.writes.submit(write).await.inspect_err(|err| {
        if matches!(err, WriteError::Full) {
            observe::shed();
        }
    })?;
    observe::record(&outcome);
    let span = Span::current();
    span.record("accepted", outcome.accepted);
    span.record("duplicates", outcome.duplicates);
    span.record("ignored", outcome.ignored);
    Ok(HttpResponse::Accepted().json(ReceiptsAccepted {
        accepted: outcome.accepted,
        duplicates: outcome.duplicates,
        ignored: outcome.ignored,
    }))
}

/// The body, refused with 413 beyond [`RECEIPTS_BODY_LIMIT`].
async fn read_body(mut payload: web::Payload) -> Result<web::BytesMut, ApiError> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|err| ApiError::Malformed(format!("unreadable body: {err}")))?;
        if body.len() + chunk.len() > RECEIPTS_BODY_LIMIT {
            return Err(ApiError::PayloadTooLarge(format!(
                "the body is larger than the {RECEIPTS_BODY_LIMIT} bytes this endpoint takes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
