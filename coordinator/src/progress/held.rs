//! Releasing or discarding the tokens a tripped safety valve kept held:
//! once an operator has checked the configuration, either the devices
//! really are gone (release: their registrations are deleted, exactly as
//! cleanup would have) or the answers were the misconfiguration's (discard:
//! the held rows go, the registrations stay).
//!
//! Both work in bounded batches, each its own short transaction holding
//! the notification's row lock (as cleanup does), so a million held tokens
//! never make one long transaction; running either twice is harmless.

use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use uuid::Uuid;

use crate::metrics;
use crate::store::StoreError;
use crate::store::delivery::{delete_registrations, lock};
use crate::store::held::take_batch;

/// Held tokens handled per transaction.
const BATCH: u32 = 5_000;

/// What to do with the held tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Delete their registrations.
    Release,
    /// Keep their registrations.
    Discard,
}

/// What releasing or discarding did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    UnknownNotification,
    /// The notification is not complete: its valve has not judged yet.
    Undecided,
    Done {
        /// Held tokens removed.
        tokens: u64,
        /// Registrations deleted (release only; registrations renewed
        /// since the send are never deleted).
        registrations_deleted: u64,
    },
}

/// Releases or discards the notification's held tokens (of `segment`
/// only, when given).
pub async fn settle_held(
    pool: &PgPool,
    id: Uuid,
    segment: Option<&str>,
    verdict: Verdict,
) -> Result<Settled, StoreError> {
    let mut tokens = 0;
    let mut registrations_deleted = 0;
    loop {
        let mut conn = pool.get().await.map_err(DbError::from)?;
        let tx = conn.transaction().await?;
        let Some(view) = lock(&tx, id).await? else {
            return Ok(Settled::UnknownNotification);
        };
        if view.decision.is_none() {
            return Ok(Settled::Undecided);
        }
        let taken = take_batch(&tx, id, segment, BATCH).await?;
        if verdict == Verdict::Release {
            registrations_deleted += delete_registrations(&tx, id, &taken, view.sent_at).await?;
        }
        tx.commit().await?;
        tokens += taken.len() as u64;
        // Each round removes what it took, so this ends; a round short of
        // a batch found the last of them.
        if taken.len() < BATCH as usize {
            break;
        }
    }
    if registrations_deleted > 0 {
        metrics::REGISTRATIONS_DELETED
            .get()
            .increment(registrations_deleted);
    }
    Ok(Settled::Done {
        tokens,
        registrations_deleted,
    })
}
