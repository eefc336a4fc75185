//! `GET /api/v1/notifications/{id}/curve`: the delivery curve so far — the
//! share of the reachable audience accepted by Apple / Google against the
//! seconds since the send, what the console's progress chart plots.

use actix_web::{HttpRequest, HttpResponse, get, web};
use clarion_runtime::db::DbError;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::AppState;
use super::notifications::find;
use super::snapshots::{answer, snapshot_of, unshared};
use crate::auth::{Caller, Scope};
use crate::error::{ApiError, Problem};
use crate::progress::timings::reachable;
use crate::read_cache::snapshot::SnapshotCache;
use crate::store::delivery::accept_histogram;

/// `[seconds since the send, share accepted]` at the end of each bucket of
/// the accept-time histogram, the share of `reachable` (0 to 1, rounded to
/// four decimals).
pub fn curve(buckets: &[(u32, u64)], reachable: u64) -> Vec<[f64; 2]> {
    if reachable == 0 {
        return Vec::new();
    }
    let mut accepted = 0u64;
    buckets
        .iter()
        .map(|(after_ms, count)| {
            accepted += count;
            let share = (accepted as f64 / reachable as f64).min(1.0);
            [
                f64::from(*after_ms) / 1000.0,
                (share * 10_000.0).round() / 10_000.0,
            ]
        })
        .collect()
}

/// The snapshots of notifications' curves this coordinator answers.
pub type CurveSnapshots = SnapshotCache<Curves>;

/// The three curves of a send.
#[derive(Debug, Serialize, ToSchema)]
pub struct Curves {
    /// Provider-side: `[[seconds since the send, share accepted by Apple /
    /// Google]…]` (share of the reachable audience, 0 to 1); empty before
    /// the first accept, and once the details were removed by hygiene.
    pub accepted: Vec<[f64; 2]>,
    /// Device-side: share of the reporting audience that said it received
    /// the notification, by seconds since the send (kept after hygiene).
    pub received: Vec<[f64; 2]>,
    /// Device-side: share of the reporting audience that opened it.
    pub opened: Vec<[f64; 2]>,
}

/// The delivery curves so far: accepted by Apple / Google, received on the
/// phones and opened (`[[seconds_since_send, share], …]`, 0 to 1).
///
/// Answers `ETag` (`If-None-Match` gets a bodiless 304 while nothing
/// changed); computed at most once per `CLARION_STATUS_REFRESH_MS` per
/// coordinator however many ask, so it may be that much behind.
#[utoipa::path(
    tag = "notifications",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "Notification id")),
    responses(
        (status = 200, body = Curves, headers(("ETag" = String))),
        (status = 304, description = "Unchanged since the ETag sent in If-None-Match"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a UUID", body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/v1/notifications/{id}/curve")]
pub async fn get_curve(
    caller: Caller,
    state: web::Data<AppState>,
    snapshots: web::Data<CurveSnapshots>,
    id: web::Path<Uuid>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Send)?;
    let id = id.into_inner();
    let snapshot = snapshots
        .get(id, async { snapshot_of(curves_of(&state, id).await?) })
        .await
        .map_err(unshared)?;
    Ok(answer(&request, &snapshot))
}

/// The curves of notification `id` as the database has them now.
async fn curves_of(state: &AppState, id: Uuid) -> Result<Curves, ApiError> {
    let stored = find(state, id).await?;
    let audience = stored.audience.total();
    let gone = stored.unregistered();
    let conn = state.pool.get().await.map_err(DbError::from)?;
    let buckets = accept_histogram(&*conn, id).await?;
    let (received, opened) = crate::receipts::figures::device_curves(&*conn, id).await?;
    Ok(Curves {
        accepted: curve(&buckets, reachable(audience, gone)),
        received,
        opened,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_curve_is_cumulative_and_never_above_one() {
        let points = curve(&[(250, 40), (500, 50), (1_000, 20)], 100);
        assert_eq!(points, vec![[0.25, 0.4], [0.5, 0.9], [1.0, 1.0]]);
        assert!(curve(&[(250, 40)], 0).is_empty());
    }
}
