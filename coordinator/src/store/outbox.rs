//! The `job_outbox` table: shard jobs committed with their notification and
//! waiting for the job relay to publish them.

use chrono::{DateTime, Utc};
use clarion_proto::{Notification, ShardRange};
use tokio_postgres::{GenericClient, Transaction};
use uuid::Uuid;

use super::StoreError;

/// A committed job the broker has not confirmed yet, with what its message
/// needs from the notification.
#[derive(Debug, Clone)]
pub struct WaitingJob {
    pub notification_id: Uuid,
    pub job_index: u32,
    pub jobs_planned: u32,
    pub shards: ShardRange,
    pub sent_at: DateTime<Utc>,
    pub notification: Notification,
    /// W3C trace headers of the notification's planning span.
    pub trace_context: Vec<(String, String)>,
}

/// Stores the plan of a notification: one waiting row per shard range, in
/// the caller's transaction (the one that marks the notification planned).
pub async fn insert_plan(tx: &Transaction<'_>, id: Uuid, ranges: &[ShardRange]) -> Result<(), StoreError> {
    let indexes: Vec<i32> = (0..ranges.len() as i32).collect();
    let starts: Vec<i16> = ranges.iter().map(|r| r.start() as i16).collect();
    let ends: Vec<i16> = ranges.iter().map(|r| r.end() as i16).collect();
    tx.execute(
        "INSERT INTO job_outbox (notification_id, job_index, shard_start, shard_end)
         SELECT $1, job_index, shard_start, shard_end
           FROM unnest($2::integer[], $3::smallint[], $4::smallint[]) AS plan (job_index, shard_start, shard_end)",
        &[&id, &indexes, &starts, &ends],
    )
    .await?;
    Ok(())
}

/// Claims up to `limit` waiting jobs, oldest notification first, row-locked
/// for the rest of `tx` (`SKIP LOCKED`: the relays of several coordinator
/// replicas never claim the same job). Jobs of cancelled or failed
/// notifications are never claimed.
pub async fn claim_waiting(tx: &Transaction<'_>, limit: i64) -> Result<Vec<WaitingJob>, StoreError> {
    let rows = tx
        .query(
            "SELECT o.notification_id, o.job_index, o.shard_start, o.shard_end,
                    n.jobs_planned, n.created_at, n.payload, n.trace_context
               FROM job_outbox o
               JOIN notifications n ON n.id = o.notification_id
              WHERE o.published_at IS NULL
                AND n.status NOT IN ('cancelled', 'failed', 'complete')
           ORDER BY o.created_at, o.notification_id, o.job_index
              LIMIT $1
                FOR UPDATE OF o SKIP LOCKED",
            &[&limit],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let start: i16 = row.get("shard_start");
            let end: i16 = row.get("shard_end");
            let shards = ShardRange::new(start.max(0) as u16, end.max(0) as u16)
                .map_err(|err| StoreError::Corrupt(err.to_string()))?;
            let notification = serde_json::from_value(row.get("payload"))
                .map_err(|err| StoreError::Corrupt(format!("payload: {err}")))?;
            let trace_context: Option<serde_json::Value> = row.get("trace_context");
            let trace_context = match trace_context {
                Some(value) => serde_json::from_value(value)
                    .map_err(|err| StoreError::Corrupt(format!("trace context: {err}")))?,
                None => Vec::new(),
            };
            Ok(WaitingJob {
                notification_id: row.get("notification_id"),
                job_index: row.get::<_, i32>("job_index").max(0) as u32,
                jobs_planned: row.get::<_, i32>("jobs_planned").max(0) as u32,
                shards,
                sent_at: row.get("created_at"),
                notification,
                trace_context,
            })
        })
        .collect()
}

/// Marks jobs published (their confirms arrived).
pub async fn mark_published(tx: &Transaction<'_>, jobs: &[WaitingJob]) -> Result<(), StoreError> {
    let ids: Vec<Uuid> = jobs.iter().map(|job| job.notification_id).collect();
    let indexes: Vec<i32> = jobs.iter().map(|job| job.job_index as i32).collect();
    tx.execute(
        "UPDATE job_outbox o SET published_at = now()
           FROM unnest($1::uuid[], $2::integer[]) AS done (notification_id, job_index)
          WHERE o.notification_id = done.notification_id AND o.job_index = done.job_index",
        &[&ids, &indexes],
    )
    .await?;
    Ok(())
}

/// Jobs committed and not yet confirmed by the broker (a gauge).
pub async fn waiting_count(client: &impl GenericClient) -> Result<i64, StoreError> {
    let row = client
        .query_one("SELECT count(*) FROM job_outbox WHERE published_at IS NULL", &[])
        .await?;
    Ok(row.get(0))
}
