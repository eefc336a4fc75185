//! A notification's progress: each job, batch and cleanup report counted
//! once into its row (one transaction each), its timings and 90in2
//! ([`timings`]), and its completion with the safety valve on gone and
//! invalid tokens per segment ([`completion`]), the held tokens an admin
//! releases or discards ([`held`]), and the [`watchdog`] that fails a
//! notification that stopped making progress. The SQL lives in
//! [`crate::store`]; the queue handlers in [`crate::consumers`] call in here.

pub mod completion;
pub mod held;
pub mod timings;
pub mod watchdog;

use clarion_proto::platform::segment;
use clarion_proto::{CleanupReason, DeliveryReport, JobReport, TokenCleanup};
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use uuid::Uuid;

use crate::store::delivery::{count_batches, delete_registrations, hold_tokens, lock};
use crate::store::notifications::{count_job, drop_waiting_jobs, fail};
use crate::store::{Counted, StoreError};
use completion::{Completion, Valve, complete_if_finished, complete_unpublished};

/// What recording a report did.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// Counted now; completed the notification when `Some`.
    Counted(Option<Completion>),
    /// Already counted (a redelivered report); nothing changed.
    Duplicate,
    /// No such notification (deleted, or from another installation).
    UnknownNotification,
}

/// Counts a job report once, moves the status on, and completes the
/// notification when it was the last thing outstanding.
pub async fn record_job(pool: &PgPool, report: &JobReport, valve: Valve) -> Result<Recorded, StoreError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    let recorded = match count_job(&tx, report).await? {
        Counted::Now => Recorded::Counted(complete_if_finished(&tx, report.notification_id, valve).await?),
        Counted::Duplicate => return Ok(Recorded::Duplicate),
        Counted::UnknownNotification => return Ok(Recorded::UnknownNotification),
    };
    tx.commit().await?;
    Ok(recorded)
}

/// Counts a delivery report once, adds its accept times, and completes the
/// notification when it was the last batch.
pub async fn record_delivery(
    pool: &PgPool,
    report: &DeliveryReport,
    valve: Valve,
) -> Result<Recorded, StoreError> {
    let mut recorded = record_deliveries(pool, std::slice::from_ref(report), valve).await?;
    Ok(recorded.pop().unwrap_or(Recorded::Duplicate))
}

/// Counts delivery reports once each in one transaction, and completes each
/// notification whose last batch is among them; returns each report's fate
/// in order (a completion goes with the last report counted of its
/// notification).
pub async fn record_deliveries(
    pool: &PgPool,
    reports: &[DeliveryReport],
    valve: Valve,
) -> Result<Vec<Recorded>, StoreError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    let counted = count_batches(&tx, reports).await?;
    let mut recorded: Vec<Recorded> = counted
        .iter()
        .map(|fate| match fate {
            Counted::Now => Recorded::Counted(None),
            Counted::Duplicate => Recorded::Duplicate,
            Counted::UnknownNotification => Recorded::UnknownNotification,
        })
        .collect();
    // A batch its dispatcher refused (it cannot serve the app) fails the
    // notification at once, with the refusal as its reason.
    for (report, fate) in reports.iter().zip(&counted) {
        if let (Counted::Now, Some(reason)) = (fate, report.refusal()) {
            let id = report.batch_id.notification_id;
            if fail(&tx, id, &reason).await? {
                tracing::error!(notification.id = %id, %reason, "notification failed: a dispatcher refused its batch");
            }
        }
    }
    let mut settled = std::collections::HashSet::new();
    for (i, report) in reports.iter().enumerate().rev() {
        let id = report.batch_id.notification_id;
        if counted[i] == Counted::Now && settled.insert(id) {
            recorded[i] = Recorded::Counted(complete_if_finished(&tx, id, valve).await?);
        }
    }
    tx.commit().await?;
    Ok(recorded)
}

/// What a cleanup message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleaned {
    /// Registrations deleted now.
    Deleted(u64),
    /// Gone or invalid tokens held until the notification completes.
    Held(u64),
    /// Tokens not deleted: their segment tripped the safety valve. They
    /// are held until an admin releases or discards them.
    Kept,
    UnknownNotification,
}

/// Holds the tokens the providers called gone or invalid until the
/// notification completes and the safety valve has judged their segment;
/// a cleanup arriving after that gets the segment's decision at once.
/// Registrations renewed since the send are never deleted.
pub async fn record_cleanup(pool: &PgPool, cleanup: &TokenCleanup) -> Result<Cleaned, StoreError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    let id = cleanup.notification_id;
    let Some(view) = lock(&tx, id).await? else {
        return Ok(Cleaned::UnknownNotification);
    };
    let segment = segment(cleanup.platform, cleanup.environment);
    let reason = match cleanup.reason {
        CleanupReason::Unregistered => "unregistered",
        CleanupReason::Invalid => "invalid",
    };
    let cleaned = match view.decision {
        None => Cleaned::Held(hold_tokens(&tx, id, reason, segment, &cleanup.tokens).await?),
        Some(_) if view.suspect_segments.iter().any(|s| s == segment) => {
            // Kept, and held for an admin to release or discard.
            hold_tokens(&tx, id, reason, segment, &cleanup.tokens).await?;
            Cleaned::Kept
        }
        Some(_) => Cleaned::Deleted(delete_registrations(&tx, id, &cleanup.tokens, view.sent_at).await?),
    };
    tx.commit().await?;
    Ok(cleaned)
}

/// After a cancel: drops the jobs still waiting in the outbox and completes
/// the notification when nothing else is outstanding (every published job
/// reported, every batch reported; or nothing published at all), so a
/// cancelled notification is settled like any other.
pub async fn settle_cancelled(
    pool: &PgPool,
    id: Uuid,
    valve: Valve,
) -> Result<Option<Completion>, StoreError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    if lock(&tx, id).await?.is_none() {
        return Ok(None);
    }
    let expected = drop_waiting_jobs(&tx, id).await?;
    let completion = if expected == 0 {
        complete_unpublished(&tx, id).await?;
        None
    } else {
        complete_if_finished(&tx, id, valve).await?
    };
    tx.commit().await?;
    Ok(completion)
}
