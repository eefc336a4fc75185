//! The `job_outbox` table: shard jobs committed with their notification and
//! waiting for the job relay to publish them.

use chrono::{DateTime, Utc};
use clarion_proto::{Notification, PerPlatform, ShardRange};
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Row, Transaction};
use uuid::Uuid;

use super::StoreError;
use super::lanes::Lane;
use super::notifications::{platform_counters, platforms_of};

/// A committed job the broker has not confirmed yet, with what its message
/// needs from the notification.
#[derive(Debug, Clone)]
pub struct WaitingJob {
    pub notification_id: Uuid,
    pub job_index: u32,
    pub jobs_planned: u32,
    pub shards: ShardRange,
    /// The notification's send time (its firing, if it was scheduled): its
    /// TTL and accept times count from here.
    pub sent_at: DateTime<Utc>,
    pub notification: Notification,
    /// W3C trace headers of the notification's planning span.
    pub trace_context: Vec<(String, String)>,
}

/// A notification in flight, as the relay sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct InFlight {
    pub id: Uuid,
    pub lane: Lane,
    /// When it was sent (a scheduled one: when it fired).
    pub sent_at: DateTime<Utc>,
    pub jobs_planned: u32,
    /// Jobs the broker confirmed.
    pub jobs_released: u32,
    /// Jobs still in the outbox.
    pub jobs_waiting: u32,
    /// Jobs whose harvest was reported (done or failed).
    pub jobs_reported: u32,
    /// The planner's audience estimate (`None`: some topic size was unknown).
    pub audience_estimate: Option<u64>,
    /// Tokens the reported harvests found.
    pub harvested: PerPlatform<u64>,
    /// Tokens whose outcome the dispatchers reported.
    pub reported: PerPlatform<u64>,
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

/// Advisory lock a relay holds (for its transaction) while it decides what
/// to release, so the relays of several coordinator replicas never release
/// on the same budget at once ("Clarion relay" in ASCII, cut to 8 bytes).
const SCHEDULING_LOCK_KEY: i64 = 0x436c_6172_5265_6c61;

/// Takes the scheduling lock for the rest of `tx`; `false` when another
/// relay holds it (it is releasing right now).
pub async fn try_lock_scheduling(tx: &Transaction<'_>) -> Result<bool, StoreError> {
    let row = tx
        .query_typed_one(
            "SELECT pg_try_advisory_xact_lock($1)",
            &[(&SCHEDULING_LOCK_KEY, Type::INT8)],
        )
        .await?;
    Ok(row.get(0))
}

/// The notifications in flight with what scheduling needs to know of them.
pub async fn in_flight(client: &impl GenericClient) -> Result<Vec<InFlight>, StoreError> {
    let rows = client
        .query_typed(
            concat!(
                r#"SELECT n.id, n.lane, coalesce(n.fired_at, n.created_at) AS sent_at, n.jobs_planned, n.jobs_done + n.jobs_failed AS jobs_reported,
                    n.audience_estimate, o.released, o.waiting, "#,
            platforms_of!("n.id"),
            r#" AS platforms
               FROM notifications n
               CROSS JOIN LATERAL (
                    SELECT count(*) FILTER (WHERE published_at IS NOT NULL) AS released,
                           count(*) FILTER (WHERE published_at IS NULL) AS waiting
                      FROM job_outbox WHERE notification_id = n.id) o
              WHERE n.status IN ('accepted', 'harvesting', 'dispatching')"#
            ),
            &[],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let lane: String = row.get("lane");
            let small = |name: &str| row.get::<_, i64>(name).clamp(0, i64::from(u32::MAX)) as u32;
            let platforms = platform_counters(row)?;
            Ok(InFlight {
                id: row.get("id"),
                lane: Lane::parse(&lane)
                    .ok_or_else(|| StoreError::Corrupt(format!("unknown lane {lane:?}")))?,
                sent_at: row.get("sent_at"),
                jobs_planned: row.get::<_, i32>("jobs_planned").max(0) as u32,
                jobs_released: small("released"),
                jobs_waiting: small("waiting"),
                jobs_reported: row.get::<_, i32>("jobs_reported").max(0) as u32,
                audience_estimate: row
                    .get::<_, Option<i64>>("audience_estimate")
                    .map(|n| n.max(0) as u64),
                harvested: platforms.map(|p| p.audience),
                reported: platforms.map(|p| p.delivery.total()),
            })
        })
        .collect()
}

/// The primary's current WAL position, as `pg_lsn` text: taken in the
/// claiming transaction, after the send was committed, so it covers every
/// registration committed before the send (a replica that has replayed it
/// has them all).
pub async fn primary_lsn(tx: &Transaction<'_>) -> Result<String, StoreError> {
    let row = tx.query_one("SELECT pg_current_wal_lsn()::text", &[]).await?;
    Ok(row.get(0))
}

/// Claims up to `limit` waiting jobs of one notification, lowest index
/// first, row-locked for the rest of `tx` (`SKIP LOCKED`: the relays of
/// several coordinator replicas never claim the same job). Nothing of a
/// cancelled, failed or complete notification is claimed.
pub async fn claim_waiting(
    tx: &Transaction<'_>,
    notification_id: Uuid,
    limit: i64,
) -> Result<Vec<WaitingJob>, StoreError> {
    let rows = tx
        .query_typed(
            "SELECT o.notification_id, o.job_index, o.shard_start, o.shard_end,
                    n.jobs_planned, coalesce(n.fired_at, n.created_at) AS sent_at, n.payload, n.trace_context
               FROM job_outbox o
               JOIN notifications n ON n.id = o.notification_id
              WHERE o.notification_id = $1
                AND o.published_at IS NULL
                AND n.status NOT IN ('cancelled', 'failed', 'complete')
           ORDER BY o.job_index
              LIMIT $2
                FOR UPDATE OF o SKIP LOCKED",
            &[(&notification_id, Type::UUID), (&limit, Type::INT8)],
        )
        .await?;
    rows.iter().map(waiting_job).collect()
}

fn waiting_job(row: &Row) -> Result<WaitingJob, StoreError> {
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
        sent_at: row.get("sent_at"),
        notification,
        trace_context,
    })
}

/// Marks jobs published (their confirms arrived).
pub async fn mark_published(tx: &Transaction<'_>, jobs: &[WaitingJob]) -> Result<(), StoreError> {
    let ids: Vec<Uuid> = jobs.iter().map(|job| job.notification_id).collect();
    let indexes: Vec<i32> = jobs.iter().map(|job| job.job_index as i32).collect();
    tx.execute_typed(
        "UPDATE job_outbox o SET published_at = now()
           FROM unnest($1::uuid[], $2::integer[]) AS done (notification_id, job_index)
          WHERE o.notification_id = done.notification_id AND o.job_index = done.job_index",
        &[(&ids, Type::UUID_ARRAY), (&indexes, Type::INT4_ARRAY)],
    )
    .await?;
    Ok(())
}
