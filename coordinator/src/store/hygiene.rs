//! SQL of data hygiene: the advisory lock that lets one replica run it, the
//! stale-registration purge (a walk over the heap of `registrations`, a
//! bounded range of pages per statement) and the removal of finished
//! notifications' detail rows. Every statement is its own short
//! transaction and touches at most `batch` rows.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_postgres::GenericClient;
use uuid::Uuid;

use super::StoreError;

/// Advisory lock key held while hygiene runs ("Hygiene" in ASCII), distinct
/// from the migration lock.
pub const HYGIENE_LOCK_KEY: i64 = 0x0048_7967_6965_6e65;

/// The tables holding a notification's detail rows, all keyed by
/// `notification_id` first (their primary keys serve the deletes).
pub const DETAIL_TABLES: [&str; 7] = [
    "delivery_batches",
    "notification_accepts",
    "notification_jobs",
    "published_batches",
    "held_tokens",
    "job_outbox",
    // Per-device receipts (issue 35); their aggregates stay.
    "device_receipts",
];

/// Takes the hygiene lock for this session; false when another session
/// (another replica) holds it. Released by [`unlock`] or when the session ends.
pub async fn try_lock(client: &impl GenericClient) -> Result<bool, StoreError> {
    let row = client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&HYGIENE_LOCK_KEY])
        .await?;
    Ok(row.get(0))
}

pub async fn unlock(client: &impl GenericClient) -> Result<(), StoreError> {
    client
        .execute("SELECT pg_advisory_unlock($1)", &[&HYGIENE_LOCK_KEY])
        .await?;
    Ok(())
}

/// Whether a send is going on: a notification accepted, harvesting or
/// dispatching that made progress within `recent` (one stalled for longer
/// is the watchdog's, and does not hold hygiene back). Served by
/// `notifications_in_flight_idx`.
pub async fn send_in_progress(client: &impl GenericClient, recent: Duration) -> Result<bool, StoreError> {
    let row = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM notifications
                             WHERE status IN ('accepted', 'harvesting', 'dispatching')
                               AND updated_at > now() - make_interval(secs => $1::float8))",
            &[&recent.as_secs_f64()],
        )
        .await?;
    Ok(row.get(0))
}

/// Pages of `registrations` now (rows added beyond them later are fresh).
pub async fn registration_pages(client: &impl GenericClient) -> Result<i64, StoreError> {
    let row = client
        .query_one(
            "SELECT pg_relation_size('registrations') / current_setting('block_size')::bigint",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// Deletes at most `batch` rows of devices, met in pages `first..end` of
/// `registrations`, none of whose rows was refreshed since `cutoff` (a
/// device that refreshed any topic keeps all of them). Returns the rows
/// deleted; `batch` of them means there may be more in the range.
pub async fn purge_stale_registrations(
    client: &impl GenericClient,
    first: i64,
    end: i64,
    cutoff: DateTime<Utc>,
    batch: i64,
) -> Result<u64, StoreError> {
    // The outer `updated_at` check skips a row refreshed since the inner
    // read (its new version has another ctid, and is re-checked anyway).
    Ok(client
        .execute(
            "WITH candidates AS (
                 SELECT DISTINCT token FROM registrations
                  WHERE ctid >= format('(%s,0)', $1::bigint)::tid
                    AND ctid < format('(%s,0)', $2::bigint)::tid
                    AND updated_at < $3),
             stale AS (
                 SELECT c.token FROM candidates c
                  WHERE NOT EXISTS (SELECT 1 FROM registrations f
                                     WHERE f.token = c.token AND f.updated_at >= $3)),
             doomed AS (
                 SELECT r.ctid FROM registrations r JOIN stale s ON r.token = s.token
                  WHERE r.updated_at < $3
                  LIMIT $4)
             DELETE FROM registrations
              WHERE ctid = ANY (ARRAY(SELECT ctid FROM doomed)) AND updated_at < $3",
            &[&first, &end, &cutoff, &batch],
        )
        .await?)
}

/// A finished notification whose detail rows are due for removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueNotification {
    pub id: Uuid,
    /// Its timings were never stored (it failed or was cancelled before
    /// completing): they are computed from the details before they go.
    pub timings_unsettled: bool,
    pub audience: u64,
    pub unregistered: u64,
}

/// Up to `limit` finished notifications with no activity since `cutoff`
/// whose details are still there, longest idle first.
pub async fn due_notifications(
    client: &impl GenericClient,
    cutoff: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<DueNotification>, StoreError> {
    let rows = client
        .query(
            "SELECT id,
                    completed_at IS NULL AND t50_ms IS NULL AND t90_ms IS NULL AND t99_ms IS NULL,
                    p.audience, p.unregistered
               FROM notifications
              CROSS JOIN LATERAL (
                    SELECT coalesce(sum(audience), 0)::bigint AS audience,
                           coalesce(sum(unregistered), 0)::bigint AS unregistered
                      FROM notification_platforms WHERE notification_id = notifications.id) p
              WHERE details_removed_at IS NULL AND status IN ('complete', 'failed', 'cancelled')
                AND updated_at < $1
           ORDER BY updated_at
              LIMIT $2",
            &[&cutoff, &limit],
        )
        .await?;
    let count = |row: &tokio_postgres::Row, i: usize| row.get::<_, i64>(i).max(0) as u64;
    Ok(rows
        .iter()
        .map(|row| DueNotification {
            id: row.get(0),
            timings_unsettled: row.get(1),
            audience: count(row, 2),
            unregistered: count(row, 3),
        })
        .collect())
}

/// Stores timings in a summary that has none (computed from its
/// accept-time histogram before that is removed). Running it again after
/// part of the histogram went changes nothing: with no timing stored the
/// first time, a smaller histogram reaches none either.
pub async fn settle_timings(
    client: &impl GenericClient,
    id: Uuid,
    [t50, t90, t99]: [Option<u32>; 3],
) -> Result<(), StoreError> {
    let ms = |t: Option<u32>| t.map(|ms| ms as i32);
    client
        .execute(
            "UPDATE notifications SET t50_ms = $2, t90_ms = $3, t99_ms = $4
              WHERE id = $1 AND completed_at IS NULL
                AND t50_ms IS NULL AND t90_ms IS NULL AND t99_ms IS NULL",
            &[&id, &ms(t50), &ms(t90), &ms(t99)],
        )
        .await?;
    Ok(())
}

/// Deletes at most `batch` rows of the notification from `table` (one of
/// [`DETAIL_TABLES`]); returns how many.
pub async fn remove_detail_rows(
    client: &impl GenericClient,
    table: &str,
    id: Uuid,
    batch: i64,
) -> Result<u64, StoreError> {
    if !DETAIL_TABLES.contains(&table) {
        return Err(StoreError::Corrupt(format!("{table} is not a detail table")));
    }
    Ok(client
        .execute(
            &format!(
                "DELETE FROM {table} WHERE ctid = ANY (ARRAY(
                     SELECT ctid FROM {table} WHERE notification_id = $1 LIMIT $2))"
            ),
            &[&id, &batch],
        )
        .await?)
}

/// Records that the notification's details are gone (its `updated_at`,
/// the last activity, is kept).
pub async fn mark_details_removed(client: &impl GenericClient, id: Uuid) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE notifications SET details_removed_at = now() WHERE id = $1",
            &[&id],
        )
        .await?;
    Ok(())
}
