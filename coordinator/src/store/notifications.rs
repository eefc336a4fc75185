//! The `notifications`, `notification_platforms` and `notification_jobs`
//! tables: what was sent, by whom, and how far it has got (per platform).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use clarion_proto::{JobOutcome, JobReport, Notification, PerPlatform, Platform};
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{Json, Type};
use tokio_postgres::{GenericClient, Row, Transaction};
use uuid::Uuid;

use super::{Counted, StoreError};
use crate::store::lanes::Lane;

/// A notification's life, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Accepted,
    /// Waiting for its `send_at`; nothing is planned until it fires.
    Scheduled,
    Harvesting,
    Dispatching,
    Complete,
    Failed,
    Cancelled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Accepted => "accepted",
            Status::Scheduled => "scheduled",
            Status::Harvesting => "harvesting",
            Status::Dispatching => "dispatching",
            Status::Complete => "complete",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    /// The status named `value`, if it is one.
    pub fn named(value: &str) -> Option<Self> {
        Self::parse(value).ok()
    }

    fn parse(value: &str) -> Result<Self, StoreError> {
        Ok(match value {
            "accepted" => Status::Accepted,
            "scheduled" => Status::Scheduled,
            "harvesting" => Status::Harvesting,
            "dispatching" => Status::Dispatching,
            "complete" => Status::Complete,
            "failed" => Status::Failed,
            "cancelled" => Status::Cancelled,
            other => return Err(StoreError::Corrupt(format!("unknown status {other:?}"))),
        })
    }
}

/// Everything the status API shows about one notification.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredNotification {
    pub id: Uuid,
    pub notification: Notification,
    pub status: Status,
    pub api_key_id: String,
    pub trace_id: Option<String>,
    pub jobs_planned: u32,
    pub jobs_done: u32,
    pub jobs_failed: u32,
    /// Devices the harvested jobs found, per platform.
    pub audience: PerPlatform<u64>,
    pub batches_expected: u64,
    pub batches_reported: u64,
    pub delivery: PerPlatform<PlatformDelivery>,
    pub registrations_deleted: u64,
    pub invalid_decision: Option<String>,
    pub t50_ms: Option<u32>,
    pub t90_ms: Option<u32>,
    pub t99_ms: Option<u32>,
    pub created_at: DateTime<Utc>,
    /// When a scheduled notification is to fire; `None` for a send-now.
    pub send_at: Option<DateTime<Utc>>,
    /// When a scheduled notification fired (was planned); `None` for a
    /// send-now and until it fires.
    pub fired_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    pub failure_reason: Option<String>,
    pub cleanups_parked: u32,
    /// Segments whose gone / invalid share tripped the safety valve.
    pub suspect_segments: Vec<String>,
    /// When data hygiene removed its detail rows (its timings are the
    /// stored ones from then on).
    pub details_removed_at: Option<DateTime<Utc>>,
    pub lane: Lane,
}

impl StoredNotification {
    /// When it was sent: audience, TTL and timings count from here — the
    /// firing of a scheduled notification, the creation of a send-now.
    pub fn sent_at(&self) -> DateTime<Utc> {
        self.fired_at.unwrap_or(self.created_at)
    }

    /// Scheduled and never fired (waiting, or cancelled before its time):
    /// nothing of it was ever planned or published.
    pub fn never_fired(&self) -> bool {
        self.send_at.is_some() && self.fired_at.is_none()
    }

    /// Devices reported gone, on every platform.
    pub fn unregistered(&self) -> u64 {
        self.delivery.values().map(|d| d.unregistered).sum()
    }
}

/// Provider-side: what became of one platform's pushes so far (also the status API's
/// `delivery.<platform>` object).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct PlatformDelivery {
    /// Accepted by Apple / Google.
    pub sent: u64,
    /// Given up after retries.
    pub failed: u64,
    /// Refused as malformed or foreign tokens.
    pub invalid: u64,
    /// Reported gone; their registrations are deleted.
    pub unregistered: u64,
    /// Not sent: the TTL had passed.
    pub expired: u64,
    /// Not sent: dry run.
    pub dry_run: u64,
    /// Not sent: cancelled.
    pub cancelled: u64,
    /// Not sent: the dispatcher's breaker held the segment back (its first
    /// pushes were all answered gone, invalid or misconfigured).
    pub held_back: u64,
}

impl PlatformDelivery {
    /// Pushes accounted for, whatever became of them.
    pub fn total(&self) -> u64 {
        self.sent
            + self.failed
            + self.invalid
            + self.unregistered
            + self.expired
            + self.dry_run
            + self.cancelled
            + self.held_back
    }
}

/// A notification's `notification_platforms` rows as one jsonb object keyed
/// by platform name (`{}` without any), for the notification whose id is
/// the SQL expression `$id`.
macro_rules! platforms_of {
    ($id:literal) => {
        concat!(
            "coalesce((SELECT jsonb_object_agg(c.platform, to_jsonb(c) - 'notification_id' - 'platform')
                         FROM notification_platforms c WHERE c.notification_id = ",
            $id,
            "), '{}')"
        )
    };
}
pub(super) use platforms_of;

pub(super) const COLUMNS: &str = concat!(
    "id, payload, status, api_key_id, trace_id, jobs_planned, jobs_done, jobs_failed,
     batches_expected, batches_reported, registrations_deleted, invalid_decision,
     t50_ms, t90_ms, t99_ms, created_at, send_at, fired_at, updated_at, completed_at, cancelled_at,
     failure_reason, cleanups_parked, suspect_segments, details_removed_at, lane, ",
    platforms_of!("notifications.id"),
    " AS platforms"
);

/// A notification's counters on one platform (a `notification_platforms`
/// row).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
pub struct PlatformCounters {
    /// Devices the harvested jobs found.
    pub audience: u64,
    #[serde(flatten)]
    pub delivery: PlatformDelivery,
}

/// The `platforms` column ([`platforms_of`]): each platform's counters, 0
/// for a platform without a row. A platform this build does not know (a
/// newer coordinator's, during a rolling upgrade) is left out.
pub(super) fn platform_counters(row: &Row) -> Result<PerPlatform<PlatformCounters>, StoreError> {
    let Json(by_name) = row
        .try_get::<_, Json<HashMap<String, PlatformCounters>>>("platforms")
        .map_err(|err| StoreError::Corrupt(format!("platform counters: {err}")))?;
    let mut counters = PerPlatform::<PlatformCounters>::default();
    for (name, platform_counters) in by_name {
        if let Ok(platform) = name.parse::<Platform>() {
            counters[platform] = platform_counters;
        }
    }
    Ok(counters)
}

/// A notification as a send request brings it.
#[derive(Debug, Clone, Copy)]
pub struct NewNotification<'a> {
    pub id: Uuid,
    pub notification: &'a Notification,
    pub lane: Lane,
    /// When to fire it; `None` sends now.
    pub send_at: Option<DateTime<Utc>>,
    /// Fingerprint of the sender's key.
    pub api_key_id: &'a str,
    /// The send's W3C trace id.
    pub trace_id: Option<&'a str>,
    /// The send's W3C trace headers, kept for a scheduled notification so
    /// its firing joins the send's trace.
    pub trace_context: Option<&'a [(String, String)]>,
}

/// Stores a new notification — `scheduled` when it has a `send_at`,
/// `accepted` otherwise — unless its id exists; true when stored now.
pub async fn insert_if_absent(
    client: &impl GenericClient,
    new: &NewNotification<'_>,
) -> Result<bool, StoreError> {
    let payload = to_json(new.notification)?;
    let trace_context = new.trace_context.map(to_json).transpose()?;
    let status = if new.send_at.is_some() {
        Status::Scheduled
    } else {
        Status::Accepted
    };
    let inserted = client
        .execute(
            "INSERT INTO notifications (id, payload, topics, api_key_id, trace_id, lane, send_at, status, trace_context)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
             ON CONFLICT (id) DO NOTHING",
            &[
                &new.id,
                &payload,
                &new.notification.topics,
                &new.api_key_id,
                &new.trace_id,
                &new.lane.as_str(),
                &new.send_at,
                &status.as_str(),
                &trace_context,
            ],
        )
        .await?;
    Ok(inserted == 1)
}

pub(super) fn to_json(value: &(impl serde::Serialize + ?Sized)) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(value).map_err(|err| StoreError::Corrupt(err.to_string()))
}

/// Reads and row-locks a notification for the rest of `tx`, so a concurrent
/// send of the same id waits for this one to finish planning.
pub async fn lock(tx: &Transaction<'_>, id: Uuid) -> Result<Option<StoredNotification>, StoreError> {
    let row = tx
        .query_opt(
            &format!("SELECT {COLUMNS} FROM notifications WHERE id = $1 FOR UPDATE"),
            &[&id],
        )
        .await?;
    row.map(|row| from_row(&row)).transpose()
}

/// Records that the notification is planned (its jobs are in the outbox, in
/// the same transaction): it is harvesting. A scheduled one fires now: its
/// `fired_at`, the time its audience and timings count from, is set.
/// `trace_context` is the planning span's W3C headers, for the jobs
/// published later.
pub async fn mark_planned(
    tx: &Transaction<'_>,
    id: Uuid,
    jobs: u32,
    audience_estimate: Option<u64>,
    trace_context: &[(String, String)],
) -> Result<(), StoreError> {
    let trace_context = to_json(trace_context)?;
    let audience_estimate = audience_estimate.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
    tx.execute(
        "UPDATE notifications
            SET status = 'harvesting', jobs_planned = $2, trace_context = $3, audience_estimate = $4,
                fired_at = CASE WHEN status = 'scheduled' THEN now() ELSE fired_at END,
                updated_at = now()
          WHERE id = $1",
        &[&id, &(jobs as i32), &trace_context, &audience_estimate],
    )
    .await?;
    Ok(())
}

pub async fn get(pool: &PgPool, id: Uuid) -> Result<Option<StoredNotification>, StoreError> {
    let conn = pool.get().await.map_err(DbError::from)?;
    let row = conn
        .query_opt(
            &format!("SELECT {COLUMNS} FROM notifications WHERE id = $1"),
            &[&id],
        )
        .await?;
    row.map(|row| from_row(&row)).transpose()
}

/// Counts a job report once (`notification_jobs` primary key), adds its
/// audience and batches, and moves the status on to what the counters imply.
pub async fn count_job(tx: &Transaction<'_>, report: &JobReport) -> Result<Counted, StoreError> {
    let no_devices = PerPlatform::default();
    let (outcome, devices, batches, detail) = match &report.outcome {
        JobOutcome::Harvested { devices, batches } => ("harvested", devices, *batches as i32, None),
        JobOutcome::Failed { reason } => ("failed", &no_devices, 0, Some(reason.as_str())),
    };
    let inserted = tx
        .execute_typed(
            "INSERT INTO notification_jobs (notification_id, job_index, outcome, devices, batches, detail)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            &[
                (&report.notification_id, Type::UUID),
                (&(report.job_index as i32), Type::INT4),
                (&outcome, Type::TEXT),
                (&Json(devices), Type::JSONB),
                (&batches, Type::INT4),
                (&detail, Type::TEXT),
            ],
        )
        .await;
    match inserted {
        Ok(0) => return Ok(Counted::Duplicate),
        Ok(_) => {}
        Err(err) if err.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION) => {
            return Ok(Counted::UnknownNotification);
        }
        Err(err) => return Err(err.into()),
    }
    let failed = i32::from(outcome == "failed");
    let platforms: Vec<&str> = Platform::ALL.iter().map(|p| p.as_str()).collect();
    let audience: Vec<i64> = devices.values().map(|n| *n as i64).collect();
    // The notification's row first (the lock every writer of its counters
    // takes first), then its platforms' audience, in one statement.
    tx.execute_typed(
        "WITH counted AS (
            UPDATE notifications
               SET jobs_done = jobs_done + $2, jobs_failed = jobs_failed + $3,
                   batches_expected = batches_expected + $4, updated_at = now()
             WHERE id = $1
         RETURNING id)
         INSERT INTO notification_platforms AS p (notification_id, platform, audience)
         SELECT counted.id, platform, audience
           FROM counted, unnest($5::text[], $6::bigint[]) AS found (platform, audience)
          WHERE audience > 0
             ON CONFLICT (notification_id, platform) DO UPDATE SET audience = p.audience + EXCLUDED.audience",
        &[
            (&report.notification_id, Type::UUID),
            (&(1 - failed), Type::INT4),
            (&failed, Type::INT4),
            (&i64::from(batches), Type::INT8),
            (&platforms, Type::TEXT_ARRAY),
            (&audience, Type::INT8_ARRAY),
        ],
    )
    .await?;
    // Counters first, then the status they imply (both in this transaction).
    tx.execute_typed(
        "UPDATE notifications
            SET status = CASE
                  WHEN status IN ('complete', 'failed', 'cancelled') THEN status
                  WHEN jobs_failed > 0 THEN 'failed'
                  WHEN jobs_planned > 0 AND jobs_done >= jobs_planned THEN 'dispatching'
                  ELSE status
                END
          WHERE id = $1",
        &[(&report.notification_id, Type::UUID)],
    )
    .await?;
    Ok(Counted::Now)
}

pub(super) fn from_row(row: &Row) -> Result<StoredNotification, StoreError> {
    let payload: serde_json::Value = row.get("payload");
    let notification =
        serde_json::from_value(payload).map_err(|err| StoreError::Corrupt(format!("payload: {err}")))?;
    let count = |name: &str| -> u64 { row.get::<_, i64>(name).max(0) as u64 };
    let small = |name: &str| -> u32 { row.get::<_, i32>(name).max(0) as u32 };
    let platforms = platform_counters(row)?;
    Ok(StoredNotification {
        id: row.get("id"),
        notification,
        status: Status::parse(row.get("status"))?,
        api_key_id: row.get("api_key_id"),
        trace_id: row.get("trace_id"),
        jobs_planned: small("jobs_planned"),
        jobs_done: small("jobs_done"),
        jobs_failed: small("jobs_failed"),
        audience: platforms.map(|p| p.audience),
        batches_expected: count("batches_expected"),
        batches_reported: count("batches_reported"),
        delivery: platforms.map(|p| p.delivery),
        registrations_deleted: count("registrations_deleted"),
        invalid_decision: row.get("invalid_decision"),
        t50_ms: timing(row, "t50_ms"),
        t90_ms: timing(row, "t90_ms"),
        t99_ms: timing(row, "t99_ms"),
        created_at: row.get("created_at"),
        send_at: row.get("send_at"),
        fired_at: row.get("fired_at"),
        updated_at: row.get("updated_at"),
        completed_at: row.get("completed_at"),
        cancelled_at: row.get("cancelled_at"),
        failure_reason: row.get("failure_reason"),
        cleanups_parked: small("cleanups_parked"),
        suspect_segments: row.get("suspect_segments"),
        details_removed_at: row.get("details_removed_at"),
        lane: {
            let lane: String = row.get("lane");
            Lane::parse(&lane).ok_or_else(|| StoreError::Corrupt(format!("unknown lane {lane:?}")))?
        },
    })
}

fn timing(row: &Row, name: &str) -> Option<u32> {
    row.get::<_, Option<i32>>(name).map(|ms| ms.max(0) as u32)
}

/// What a cancel request found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// Marked cancelled now (or it already was). `never_fired`: it was
    /// scheduled and cancelled before its time, so nothing of it was ever
    /// planned or published (and now never will be).
    Cancelled {
        never_fired: bool,
    },
    /// Too late: it is complete.
    AlreadyComplete,
    Unknown,
}

/// Marks a notification cancelled unless it is complete (in the caller's
/// transaction, which also records the cancel in the audit log); one
/// already cancelled is left as it is (a cancel is idempotent). The row
/// lock orders it with the firing of a scheduled notification: whichever
/// commits first, the other sees its outcome.
pub async fn cancel(tx: &Transaction<'_>, id: Uuid) -> Result<Cancel, StoreError> {
    let row = tx
        .query_opt(
            "UPDATE notifications
                SET status = CASE WHEN status = 'complete' THEN status ELSE 'cancelled' END,
                    cancelled_at = CASE WHEN status = 'complete' THEN cancelled_at
                                        ELSE coalesce(cancelled_at, now()) END,
                    -- A second cancel changes nothing, not even the time of the last change.
                    updated_at = CASE WHEN status IN ('complete', 'cancelled') THEN updated_at ELSE now() END
              WHERE id = $1
          RETURNING status, send_at IS NOT NULL AND fired_at IS NULL",
            &[&id],
        )
        .await?;
    let outcome = match row {
        None => Cancel::Unknown,
        Some(row) if row.get::<_, &str>(0) == "complete" => Cancel::AlreadyComplete,
        Some(row) => Cancel::Cancelled {
            never_fired: row.get(1),
        },
    };
    Ok(outcome)
}

/// Drops a cancelled notification's jobs still waiting in the outbox (the
/// relay skips cancelled notifications, so they would never go out) and no
/// longer expects them; returns how many jobs are still expected.
pub async fn drop_waiting_jobs(tx: &Transaction<'_>, id: Uuid) -> Result<u32, StoreError> {
    let dropped = tx
        .execute(
            "DELETE FROM job_outbox WHERE notification_id = $1 AND published_at IS NULL",
            &[&id],
        )
        .await?;
    let row = tx
        .query_one(
            "UPDATE notifications SET jobs_planned = greatest(jobs_planned - $2, 0)
              WHERE id = $1
          RETURNING jobs_planned",
            &[&id, &(dropped as i32)],
        )
        .await?;
    Ok(row.get::<_, i32>(0).max(0) as u32)
}

/// Fails a notification still in flight, keeping the first reason given;
/// a finished (complete, failed, cancelled) one is left as it is. True when
/// it was failed now.
pub async fn fail(client: &impl GenericClient, id: Uuid, reason: &str) -> Result<bool, StoreError> {
    let failed = client
        .execute(
            "UPDATE notifications
                SET status = 'failed', failure_reason = coalesce(failure_reason, $2), updated_at = now()
              WHERE id = $1 AND status IN ('accepted', 'harvesting', 'dispatching')",
            &[&id, &reason],
        )
        .await?;
    Ok(failed > 0)
}

/// Counts a token cleanup given up for the notification (its registrations
/// stay).
pub async fn count_parked_cleanup(client: &impl GenericClient, id: Uuid) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE notifications SET cleanups_parked = cleanups_parked + 1, updated_at = now() WHERE id = $1",
            &[&id],
        )
        .await?;
    Ok(())
}

/// A notification the watchdog failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stalled {
    pub id: Uuid,
    pub reason: String,
}

/// Fails every notification in flight whose last progress (a counted
/// report, or its planning) is older than `stall`, with a reason that says
/// what is unaccounted for — unless it is only waiting: none of its jobs
/// has been published yet (RabbitMQ out of reach, or the job relay serves
/// other sends first), or some of its jobs wait in the outbox while
/// another notification in flight progressed within `stall` (the schedule
/// serves that one first). When nothing progresses anywhere, a
/// notification with published jobs is stalled however many more wait.
pub async fn fail_stalled(
    client: &impl GenericClient,
    stall: std::time::Duration,
) -> Result<Vec<Stalled>, StoreError> {
    let seconds = stall.as_secs_f64();
    let rows = client
        .query(
            "UPDATE notifications n
                SET status = 'failed', updated_at = now(),
                    failure_reason = coalesce(n.failure_reason, format(
                        'no progress for %s s: %s of %s shard jobs unreported, %s of %s token batches unreported',
                        round($1::float8)::bigint,
                        greatest(n.jobs_planned - n.jobs_done - n.jobs_failed, 0), n.jobs_planned,
                        greatest(n.batches_expected - n.batches_reported, 0), n.batches_expected))
              WHERE n.status IN ('accepted', 'harvesting', 'dispatching')
                AND n.updated_at < now() - make_interval(secs => $1::float8)
                -- Nothing published yet: waiting for the broker or the schedule.
                AND EXISTS (SELECT 1 FROM job_outbox o
                             WHERE o.notification_id = n.id AND o.published_at IS NOT NULL)
                -- Jobs held back while the schedule serves a send that moves.
                AND NOT (EXISTS (SELECT 1 FROM job_outbox o
                                  WHERE o.notification_id = n.id AND o.published_at IS NULL)
                         AND EXISTS (SELECT 1 FROM notifications m
                                      WHERE m.status IN ('accepted', 'harvesting', 'dispatching')
                                        AND m.id <> n.id
                                        AND m.updated_at >= now() - make_interval(secs => $1::float8)))
          RETURNING n.id, n.failure_reason",
            &[&seconds],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| Stalled {
            id: row.get(0),
            reason: row.get::<_, Option<String>>(1).unwrap_or_default(),
        })
        .collect())
}
