//! A snapshot of a read (status, curve; see `crate::read_cache::snapshot`)
//! as an HTTP answer: its bytes with its ETag, or a bodiless 304 when the
//! request's `If-None-Match` already names it — decided from memory,
//! without the database.

use std::sync::Arc;

use actix_web::http::header::{self, ETAG, EntityTag, IfNoneMatch};
use actix_web::{HttpRequest, HttpResponse};
use serde::Serialize;

use crate::error::ApiError;
use crate::read_cache::snapshot::{Snapshot, SnapshotError};

/// `value` made a snapshot (its JSON bytes and ETag).
pub fn snapshot_of<T: Serialize>(value: T) -> Result<Snapshot<T>, ApiError> {
    Snapshot::of(value).map_err(|err| ApiError::Internal(format!("cannot encode the answer: {err}")))
}

/// The answer to `request` from `snapshot`: 200 with its JSON, or 304 when
/// `If-None-Match` names its ETag (pollers save the body).
pub fn answer<T>(request: &HttpRequest, snapshot: &Snapshot<T>) -> HttpResponse {
    let etag = EntityTag::new_strong(snapshot.etag.clone());
    let unchanged = match header::Header::parse(request) {
        Ok(IfNoneMatch::Any) => true,
        Ok(IfNoneMatch::Items(tags)) => tags.iter().any(|tag| tag.weak_eq(&etag)),
        Err(_) => false,
    };
    if unchanged {
        return HttpResponse::NotModified().insert_header((ETAG, etag)).finish();
    }
    HttpResponse::Ok()
        .insert_header((ETAG, etag))
        .content_type("application/json")
        .body(snapshot.body.clone())
}

/// The error of a snapshot as the API answers it: the computation's own
/// (404 for an unknown id, 503 for an unavailable database), shared by
/// every request that waited for it; 503 when it took too long.
pub fn unshared(err: SnapshotError<ApiError>) -> ApiError {
    let shared = match err {
        SnapshotError::Failed(shared) => shared,
        timed_out @ SnapshotError::TimedOut { .. } => return ApiError::Unavailable(timed_out.to_string()),
    };
    Arc::try_unwrap(shared).unwrap_or_else(|shared| match &*shared {
        ApiError::NotFound(detail) => ApiError::NotFound(detail.clone()),
        ApiError::Unavailable(detail) => ApiError::Unavailable(detail.clone()),
        other => ApiError::Internal(other.to_string()),
    })
}
