//! A notification's progress: each job, batch and cleanup report counted
//! once into its row (one transaction each), its timings and 90in2
//! ([`timings`]), and its completion with the safety valve on invalid
//! tokens ([`completion`]). The SQL lives in [`crate::store`]; the queue
//! handlers in [`crate::handlers`] call in here.

pub mod completion;
pub mod timings;

use clarion_proto::{CleanupReason, DeliveryReport, JobReport, TokenCleanup};
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;

use crate::store::delivery::{count_batch, delete_registrations, hold_invalid_tokens, lock};
use crate::store::notifications::count_job;
use crate::store::{Counted, StoreError};
use completion::{Completion, complete_if_finished};

/// What recording a report did.
#[derive(Debug, Clone, Copy, PartialEq)]
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
pub async fn record_job(
    pool: &PgPool,
    report: &JobReport,
    invalid_threshold: f64,
) -> Result<Recorded, StoreError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    let recorded = match count_job(&tx, report).await? {
        Counted::Now => {
            Recorded::Counted(complete_if_finished(&tx, report.notification_id, invalid_threshold).await?)
        }
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
    invalid_threshold: f64,
) -> Result<Recorded, StoreError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    let id = report.batch_id.notification_id;
    let recorded = match count_batch(&tx, report).await? {
        Counted::Now => Recorded::Counted(complete_if_finished(&tx, id, invalid_threshold).await?),
        Counted::Duplicate => return Ok(Recorded::Duplicate),
        Counted::UnknownNotification => return Ok(Recorded::UnknownNotification),
    };
    tx.commit().await?;
    Ok(recorded)
}

/// What a cleanup message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleaned {
    /// Registrations deleted now.
    Deleted(u64),
    /// Invalid tokens held until the notification completes.
    Held(u64),
    /// Invalid tokens dropped: the notification decided to keep them.
    Kept,
    UnknownNotification,
}

/// Deletes the registrations of unregistered tokens at once; holds invalid
/// tokens until the notification's decision (or applies it if made).
/// Registrations renewed since the send are never deleted.
pub async fn record_cleanup(pool: &PgPool, cleanup: &TokenCleanup) -> Result<Cleaned, StoreError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    let id = cleanup.notification_id;
    let Some((sent_at, decision)) = lock(&tx, id).await? else {
        return Ok(Cleaned::UnknownNotification);
    };
    let cleaned = match (cleanup.reason, decision.as_deref()) {
        (CleanupReason::Unregistered, _) | (CleanupReason::Invalid, Some("delete")) => {
            Cleaned::Deleted(delete_registrations(&tx, id, &cleanup.tokens, sent_at).await?)
        }
        (CleanupReason::Invalid, Some(_)) => Cleaned::Kept,
        (CleanupReason::Invalid, None) => Cleaned::Held(hold_invalid_tokens(&tx, id, &cleanup.tokens).await?),
    };
    tx.commit().await?;
    Ok(cleaned)
}
