//! Delivery progress in the database: batch reports counted once, the
//! accept-time histogram, token cleanup, and the completion of a
//! notification (with the safety valve on invalid tokens).

use chrono::{DateTime, Utc};
use clarion_proto::{CleanupReason, DeliveryReport, TokenCleanup};
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use tokio_postgres::{GenericClient, Transaction};
use uuid::Uuid;

use super::notifications::{Recorded, StoreError};

/// What completing a notification decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Completion {
    pub audience: u64,
    pub invalid: u64,
    /// Registrations deleted for invalid tokens (0 when withheld).
    pub invalid_deleted: u64,
    /// True when the invalid share was above the threshold: nothing was
    /// deleted and the notification is marked.
    pub invalid_withheld: bool,
    pub timings: Timings,
}

/// Time from the send request until half, 90% and 99% of the reachable
/// audience (less the devices reported gone) was accepted by Apple / Google;
/// `None` while (or if never) reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    pub t50_ms: Option<u32>,
    pub t90_ms: Option<u32>,
    pub t99_ms: Option<u32>,
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
    if lock(&tx, id).await?.is_none() {
        return Ok(Recorded::UnknownNotification);
    }
    let c = &report.counts;
    let n = |v: u32| v as i32;
    let inserted = tx
        .execute(
            "INSERT INTO delivery_batches (notification_id, job_index, seq, platform, sent, failed, invalid,
                                           unregistered, expired, dry_run, cancelled, first_accept_at, last_accept_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) ON CONFLICT DO NOTHING",
            &[
                &id,
                &(report.batch_id.job_index as i32),
                &(report.batch_id.seq as i32),
                &report.platform.as_str(),
                &n(c.sent),
                &n(c.failed),
                &n(c.invalid),
                &n(c.unregistered),
                &n(c.expired),
                &n(c.dry_run),
                &n(c.cancelled),
                &report.first_accept_at,
                &report.last_accept_at,
            ],
        )
        .await?;
    if inserted == 0 {
        return Ok(Recorded::Duplicate);
    }
    let p = report.platform.as_str();
    let w = |v: u32| i64::from(v);
    tx.execute(
        &format!(
            "UPDATE notifications
                SET sent_{p} = sent_{p} + $2, failed_{p} = failed_{p} + $3, invalid_{p} = invalid_{p} + $4,
                    unregistered_{p} = unregistered_{p} + $5, expired_{p} = expired_{p} + $6,
                    dry_run_{p} = dry_run_{p} + $7, cancelled_{p} = cancelled_{p} + $8,
                    batches_reported = batches_reported + 1, updated_at = now()
              WHERE id = $1"
        ),
        &[
            &id,
            &w(c.sent),
            &w(c.failed),
            &w(c.invalid),
            &w(c.unregistered),
            &w(c.expired),
            &w(c.dry_run),
            &w(c.cancelled),
        ],
    )
    .await?;
    if !report.accepts.is_empty() {
        let after: Vec<i32> = report.accepts.iter().map(|b| b.after_ms as i32).collect();
        let counts: Vec<i64> = report.accepts.iter().map(|b| i64::from(b.count)).collect();
        tx.execute(
            "INSERT INTO notification_accepts (notification_id, after_ms, accepted)
             SELECT $1, * FROM unnest($2::integer[], $3::bigint[])
             ON CONFLICT (notification_id, after_ms)
             DO UPDATE SET accepted = notification_accepts.accepted + EXCLUDED.accepted",
            &[&id, &after, &counts],
        )
        .await?;
    }
    let completion = maybe_complete(&tx, id, invalid_threshold).await?;
    tx.commit().await?;
    Ok(Recorded::Counted(completion))
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
    let Some((created_at, decision)) = lock(&tx, cleanup.notification_id).await? else {
        return Ok(Cleaned::UnknownNotification);
    };
    let cleaned = match (cleanup.reason, decision.as_deref()) {
        (CleanupReason::Unregistered, _) | (CleanupReason::Invalid, Some("delete")) => {
            Cleaned::Deleted(delete_tokens(&tx, cleanup.notification_id, &cleanup.tokens, created_at).await?)
        }
        (CleanupReason::Invalid, Some(_)) => Cleaned::Kept,
        (CleanupReason::Invalid, None) => {
            let held = tx
                .execute(
                    "INSERT INTO pending_invalid_tokens (notification_id, token)
                     SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING",
                    &[&cleanup.notification_id, &cleanup.tokens],
                )
                .await?;
            Cleaned::Held(held)
        }
    };
    tx.commit().await?;
    Ok(cleaned)
}

/// Completes the notification if every job and every batch is accounted for
/// and it is not complete yet: timings, status, and the invalid-token decision.
pub async fn maybe_complete(
    tx: &Transaction<'_>,
    id: Uuid,
    invalid_threshold: f64,
) -> Result<Option<Completion>, StoreError> {
    let row = tx
        .query_opt(
            "SELECT created_at, audience_ios + audience_android AS audience, invalid_ios + invalid_android AS invalid,
                    unregistered_ios + unregistered_android AS unregistered
               FROM notifications
              WHERE id = $1 AND invalid_decision IS NULL AND jobs_planned > 0
                AND jobs_done + jobs_failed >= jobs_planned AND batches_reported >= batches_expected",
            &[&id],
        )
        .await?;
    let Some(row) = row else { return Ok(None) };
    let created_at: DateTime<Utc> = row.get("created_at");
    let audience = row.get::<_, i64>("audience").max(0) as u64;
    let invalid = row.get::<_, i64>("invalid").max(0) as u64;
    let unregistered = row.get::<_, i64>("unregistered").max(0) as u64;
    // Devices reported gone cannot be reached: timings count without them.
    let timings = timings(tx, id, audience.saturating_sub(unregistered)).await?;
    let withheld = audience > 0 && invalid as f64 > invalid_threshold * audience as f64;
    let invalid_deleted = if withheld {
        0
    } else {
        let pending: Vec<String> = tx
            .query(
                "SELECT token FROM pending_invalid_tokens WHERE notification_id = $1",
                &[&id],
            )
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        delete_tokens(tx, id, &pending, created_at).await?
    };
    tx.execute(
        "DELETE FROM pending_invalid_tokens WHERE notification_id = $1",
        &[&id],
    )
    .await?;
    let ms = |t: Option<u32>| t.map(|ms| ms as i32);
    tx.execute(
        "UPDATE notifications
            SET status = CASE WHEN status IN ('harvesting', 'dispatching') THEN 'complete' ELSE status END,
                invalid_decision = $2, t50_ms = $3, t90_ms = $4, t99_ms = $5,
                completed_at = now(), updated_at = now()
          WHERE id = $1",
        &[
            &id,
            &if withheld { "keep" } else { "delete" },
            &ms(timings.t50_ms),
            &ms(timings.t90_ms),
            &ms(timings.t99_ms),
        ],
    )
    .await?;
    Ok(Some(Completion {
        audience,
        invalid,
        invalid_deleted,
        invalid_withheld: withheld,
        timings,
    }))
}

/// The timings so far, from the accept-time histogram.
pub async fn timings(client: &impl GenericClient, id: Uuid, audience: u64) -> Result<Timings, StoreError> {
    let rows = client
        .query(
            "SELECT after_ms, accepted FROM notification_accepts WHERE notification_id = $1 ORDER BY after_ms",
            &[&id],
        )
        .await?;
    let buckets: Vec<(u32, u64)> = rows
        .iter()
        .map(|row| {
            (
                row.get::<_, i32>(0).max(0) as u32,
                row.get::<_, i64>(1).max(0) as u64,
            )
        })
        .collect();
    Ok(percentiles(&buckets, audience))
}

/// The end of the first bucket by which `q` of the audience was accepted.
pub fn percentiles(buckets: &[(u32, u64)], audience: u64) -> Timings {
    let at = |q: f64| -> Option<u32> {
        if audience == 0 {
            return None;
        }
        let needed = (q * audience as f64).ceil() as u64;
        let mut accepted = 0;
        buckets.iter().find_map(|(after_ms, count)| {
            accepted += count;
            (accepted >= needed).then_some(after_ms + clarion_proto::ACCEPT_BUCKET_MS)
        })
    };
    Timings {
        t50_ms: at(0.5),
        t90_ms: at(0.9),
        t99_ms: at(0.99),
    }
}

/// Locks the notification row; its creation time and invalid-token decision.
async fn lock(tx: &Transaction<'_>, id: Uuid) -> Result<Option<(DateTime<Utc>, Option<String>)>, StoreError> {
    let row = tx
        .query_opt(
            "SELECT created_at, invalid_decision FROM notifications WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .await?;
    Ok(row.map(|row| (row.get(0), row.get(1))))
}

async fn delete_tokens(
    tx: &Transaction<'_>,
    id: Uuid,
    tokens: &[String],
    sent_at: DateTime<Utc>,
) -> Result<u64, StoreError> {
    if tokens.is_empty() {
        return Ok(0);
    }
    let deleted = tx
        .execute(
            "DELETE FROM registrations WHERE token = ANY($1) AND updated_at < $2",
            &[&tokens, &sent_at],
        )
        .await?;
    tx.execute(
        "UPDATE notifications SET registrations_deleted = registrations_deleted + $2 WHERE id = $1",
        &[&id, &(deleted as i64)],
    )
    .await?;
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_bucket_ends_reached_by_that_share() {
        let buckets = [(0, 40), (10, 40), (500, 15), (1000, 4)];
        let t = percentiles(&buckets, 100);
        assert_eq!(
            t,
            Timings {
                t50_ms: Some(20),
                t90_ms: Some(510),
                t99_ms: Some(1010)
            }
        );
        // 99 of 100 accepted: t99 reached, nothing beyond.
        let t = percentiles(&buckets, 101);
        assert_eq!(t.t99_ms, None);
        assert_eq!(percentiles(&[], 0), Timings::default());
    }
}
