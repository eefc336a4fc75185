//! Scheduled notifications in the `notifications` table: claiming the next
//! one due (row-locked, `SKIP LOCKED`, so coordinator replicas firing at
//! once never take the same one), replacing one still waiting, and failing
//! one that cannot be fired.

use chrono::{DateTime, Utc};
use clarion_proto::Notification;
use tokio_postgres::{GenericClient, Transaction};
use uuid::Uuid;

use super::StoreError;
use super::notifications::to_json;
use crate::store::lanes::Lane;

/// A scheduled notification whose time has come, locked for the rest of
/// the claiming transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub id: Uuid,
    pub send_at: DateTime<Utc>,
    /// The W3C trace headers of the send that scheduled it (empty when
    /// untraced or unreadable: they only join the firing to its trace).
    pub trace_context: Vec<(String, String)>,
}

/// Whether a scheduled notification is due: a look without locking
/// anything, so a scheduler with nothing to fire spends one statement, not
/// a transaction.
pub async fn any_due(client: &impl GenericClient) -> Result<bool, StoreError> {
    let row = client
        .query_typed_one(
            "SELECT EXISTS (SELECT 1 FROM notifications WHERE status = 'scheduled' AND send_at <= now())",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// Claims the scheduled notification due first, row-locked for the rest of
/// `tx`. A row another transaction holds (a replica firing it, a cancel or
/// a replacement) is skipped, and a row fired or cancelled meanwhile no
/// longer matches (PostgreSQL re-checks the condition on the newest
/// version of a row it locks), so each is claimed by one firing only.
pub async fn claim_due(tx: &Transaction<'_>) -> Result<Option<Due>, StoreError> {
    let row = tx
        .query_opt(
            "SELECT id, send_at, trace_context FROM notifications
              WHERE status = 'scheduled' AND send_at <= now()
           ORDER BY send_at
              LIMIT 1
                FOR UPDATE SKIP LOCKED",
            &[],
        )
        .await?;
    Ok(row.map(|row| {
        let trace_context: Option<serde_json::Value> = row.get("trace_context");
        Due {
            id: row.get("id"),
            send_at: row.get("send_at"),
            trace_context: trace_context
                .and_then(|value| serde_json::from_value(value).ok())
                .unwrap_or_default(),
        }
    }))
}

/// Replaces the content, lane and time of a scheduled notification,
/// locked by the caller's transaction (which checked that it is still
/// scheduled). Its sender, trace and creation time stay.
pub async fn replace(
    tx: &Transaction<'_>,
    id: Uuid,
    notification: &Notification,
    lane: Lane,
    send_at: DateTime<Utc>,
) -> Result<(), StoreError> {
    let payload = to_json(notification)?;
    tx.execute(
        "UPDATE notifications
            SET payload = $2, topics = $3, lane = $4, send_at = $5, updated_at = now()
          WHERE id = $1 AND status = 'scheduled'",
        &[&id, &payload, &notification.topics, &lane.as_str(), &send_at],
    )
    .await?;
    Ok(())
}

/// Fails a scheduled notification that cannot be fired (its stored content
/// is unreadable), so it no longer blocks the ones due after it.
pub async fn fail_unfireable(tx: &Transaction<'_>, id: Uuid, reason: &str) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE notifications
            SET status = 'failed', failure_reason = coalesce(failure_reason, $2), updated_at = now()
          WHERE id = $1 AND status = 'scheduled'",
        &[&id, &reason],
    )
    .await?;
    Ok(())
}
