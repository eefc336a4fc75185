//! The held tokens of a notification's suspect segments, for an admin to
//! look at, release (delete their registrations) or discard (keep the
//! registrations): counts, and removal in bounded batches.

use tokio_postgres::{GenericClient, Transaction};
use uuid::Uuid;

use super::StoreError;

/// Held tokens of one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldCount {
    pub segment: String,
    /// Answered gone (uninstalled).
    pub gone: u64,
    /// Refused as invalid.
    pub invalid: u64,
}

/// The notification's held tokens per segment, in segment order.
pub async fn counts(client: &impl GenericClient, id: Uuid) -> Result<Vec<HeldCount>, StoreError> {
    let rows = client
        .query(
            "SELECT segment, count(*) FILTER (WHERE reason = 'unregistered'), count(*) FILTER (WHERE reason = 'invalid')
               FROM held_tokens WHERE notification_id = $1 GROUP BY segment ORDER BY segment",
            &[&id],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| HeldCount {
            segment: row.get(0),
            gone: row.get::<_, i64>(1).max(0) as u64,
            invalid: row.get::<_, i64>(2).max(0) as u64,
        })
        .collect())
}

/// Removes up to `limit` held tokens of the notification (of `segment`
/// only, when given) and returns them.
pub async fn take_batch(
    tx: &Transaction<'_>,
    id: Uuid,
    segment: Option<&str>,
    limit: u32,
) -> Result<Vec<String>, StoreError> {
    Ok(tx
        .query(
            "DELETE FROM held_tokens h
              USING (SELECT token FROM held_tokens
                      WHERE notification_id = $1 AND ($2::text IS NULL OR segment = $2)
                      LIMIT $3) pick
              WHERE h.notification_id = $1 AND h.token = pick.token
          RETURNING h.token",
            &[&id, &segment, &i64::from(limit)],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect())
}
