//! The delivery tables: `delivery_batches` (each batch report counted once),
//! `notification_accepts` (the accept-time histogram),
//! `held_tokens` (gone and invalid tokens held for the safety valve), and
//! the registrations they delete. SQL only; [`crate::progress`] decides.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use clarion_proto::platform::segment;
use clarion_proto::{DeliveryCounts, DeliveryReport, Platform};
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Transaction};
use uuid::Uuid;

use super::{Counted, StoreError};

/// Counts delivery reports once each (`delivery_batches` primary key), in
/// set-based statements whatever their number: the notifications locked in
/// one statement, the batches inserted in one, the counts added in one
/// (per notification and platform) and the accept times in one upsert.
/// Returns each report's fate, in order; a report repeated within `reports`
/// counts once.
pub async fn count_batches(
    tx: &Transaction<'_>,
    reports: &[DeliveryReport],
) -> Result<Vec<Counted>, StoreError> {
    let mut ids: Vec<Uuid> = reports.iter().map(|r| r.batch_id.notification_id).collect();
    ids.sort_unstable();
    ids.dedup();
    let known: HashSet<Uuid> = tx
        .query_typed(
            "SELECT id FROM notifications WHERE id = ANY($1) ORDER BY id FOR UPDATE",
            &[(&ids, Type::UUID_ARRAY)],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let candidates: Vec<&DeliveryReport> = reports
        .iter()
        .filter(|r| known.contains(&r.batch_id.notification_id))
        .collect();
    let inserted = insert_batches(tx, &candidates).await?;

    // In order: the first report of each inserted key counts, the rest are
    // duplicates (of a row already there, or of an earlier report here).
    let mut fresh: HashSet<(Uuid, u32, u32)> = inserted;
    let mut fates = Vec::with_capacity(reports.len());
    let mut totals: HashMap<(Uuid, Platform), Totals> = HashMap::new();
    let mut accepts: HashMap<(Uuid, u32), u64> = HashMap::new();
    for report in reports {
        let id = report.batch_id.notification_id;
        if !known.contains(&id) {
            fates.push(Counted::UnknownNotification);
            continue;
        }
        if !fresh.remove(&(id, report.batch_id.job_index, report.batch_id.seq)) {
            fates.push(Counted::Duplicate);
            continue;
        }
        totals
            .entry((id, report.platform))
            .or_default()
            .add(&report.counts);
        for bucket in &report.accepts {
            *accepts.entry((id, bucket.after_ms)).or_default() += u64::from(bucket.count);
        }
        fates.push(Counted::Now);
    }
    add_counts(tx, &totals).await?;
    add_accepts(tx, &accepts).await?;
    Ok(fates)
}

/// Inserts the reports' `delivery_batches` rows (none twice); returns the
/// keys inserted now.
async fn insert_batches(
    tx: &Transaction<'_>,
    reports: &[&DeliveryReport],
) -> Result<HashSet<(Uuid, u32, u32)>, StoreError> {
    if reports.is_empty() {
        return Ok(HashSet::new());
    }
    let column = |f: &dyn Fn(&DeliveryReport) -> i32| -> Vec<i32> { reports.iter().map(|r| f(r)).collect() };
    let n = |v: u32| v as i32;
    let ids: Vec<Uuid> = reports.iter().map(|r| r.batch_id.notification_id).collect();
    let platforms: Vec<&str> = reports.iter().map(|r| r.platform.as_str()).collect();
    let segments: Vec<&str> = reports
        .iter()
        .map(|r| segment(r.platform, r.environment))
        .collect();
    let first: Vec<Option<DateTime<Utc>>> = reports.iter().map(|r| r.first_accept_at).collect();
    let last: Vec<Option<DateTime<Utc>>> = reports.iter().map(|r| r.last_accept_at).collect();
    let rows = tx
        .query_typed(
            "INSERT INTO delivery_batches (notification_id, job_index, seq, platform, sent, failed, invalid,
                                           unregistered, expired, dry_run, cancelled, first_accept_at, last_accept_at,
                                           segment, held_back)
             SELECT * FROM unnest($1::uuid[], $2::integer[], $3::integer[], $4::text[], $5::integer[],
                                  $6::integer[], $7::integer[], $8::integer[], $9::integer[], $10::integer[],
                                  $11::integer[], $12::timestamptz[], $13::timestamptz[], $14::text[], $15::integer[])
             ON CONFLICT DO NOTHING
             RETURNING notification_id, job_index, seq",
            &[
                (&ids, Type::UUID_ARRAY),
                (&column(&|r| n(r.batch_id.job_index)), Type::INT4_ARRAY),
                (&column(&|r| n(r.batch_id.seq)), Type::INT4_ARRAY),
                (&platforms, Type::TEXT_ARRAY),
                (&column(&|r| n(r.counts.sent)), Type::INT4_ARRAY),
                (&column(&|r| n(r.counts.failed)), Type::INT4_ARRAY),
                (&column(&|r| n(r.counts.invalid)), Type::INT4_ARRAY),
                (&column(&|r| n(r.counts.unregistered)), Type::INT4_ARRAY),
                (&column(&|r| n(r.counts.expired)), Type::INT4_ARRAY),
                (&column(&|r| n(r.counts.dry_run)), Type::INT4_ARRAY),
                (&column(&|r| n(r.counts.cancelled)), Type::INT4_ARRAY),
                (&first, Type::TIMESTAMPTZ_ARRAY),
                (&last, Type::TIMESTAMPTZ_ARRAY),
                (&segments, Type::TEXT_ARRAY),
                (&column(&|r| n(r.counts.held_back)), Type::INT4_ARRAY),
            ],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| {
            let job: i32 = row.get(1);
            let seq: i32 = row.get(2);
            (row.get(0), job as u32, seq as u32)
        })
        .collect())
}

/// Adds counted reports' totals to their notifications, in one statement
/// whatever their number: the counters of each (notification, platform)
/// upserted into `notification_platforms`, the batches counted on each
/// notification (whose rows `count_batches` locked first).
async fn add_counts(
    tx: &Transaction<'_>,
    totals: &HashMap<(Uuid, Platform), Totals>,
) -> Result<(), StoreError> {
    if totals.is_empty() {
        return Ok(());
    }
    let entries: Vec<(&(Uuid, Platform), &Totals)> = totals.iter().collect();
    let ids: Vec<Uuid> = entries.iter().map(|((id, _), _)| *id).collect();
    let platforms: Vec<&str> = entries
        .iter()
        .map(|((_, platform), _)| platform.as_str())
        .collect();
    let column = |f: fn(&Totals) -> i64| -> Vec<i64> { entries.iter().map(|(_, c)| f(c)).collect() };
    tx.execute_typed(
        "WITH counted AS (
            INSERT INTO notification_platforms AS p (notification_id, platform, sent, failed, invalid,
                                                     unregistered, expired, dry_run, cancelled, held_back)
            SELECT * FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[],
                                 $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[])
            ON CONFLICT (notification_id, platform) DO UPDATE
               SET sent = p.sent + EXCLUDED.sent, failed = p.failed + EXCLUDED.failed,
                   invalid = p.invalid + EXCLUDED.invalid, unregistered = p.unregistered + EXCLUDED.unregistered,
                   expired = p.expired + EXCLUDED.expired, dry_run = p.dry_run + EXCLUDED.dry_run,
                   cancelled = p.cancelled + EXCLUDED.cancelled, held_back = p.held_back + EXCLUDED.held_back)
         UPDATE notifications n
            SET batches_reported = n.batches_reported + b.batches, updated_at = now()
           FROM (SELECT id, sum(batches)::bigint AS batches
                   FROM unnest($1::uuid[], $11::bigint[]) AS reported (id, batches) GROUP BY id) b
          WHERE n.id = b.id",
        &[
            (&ids, Type::UUID_ARRAY),
            (&platforms, Type::TEXT_ARRAY),
            (&column(|c| c.sent), Type::INT8_ARRAY),
            (&column(|c| c.failed), Type::INT8_ARRAY),
            (&column(|c| c.invalid), Type::INT8_ARRAY),
            (&column(|c| c.unregistered), Type::INT8_ARRAY),
            (&column(|c| c.expired), Type::INT8_ARRAY),
            (&column(|c| c.dry_run), Type::INT8_ARRAY),
            (&column(|c| c.cancelled), Type::INT8_ARRAY),
            (&column(|c| c.held_back), Type::INT8_ARRAY),
            (&column(|c| c.batches), Type::INT8_ARRAY),
        ],
    )
    .await?;
    Ok(())
}

/// Adds accept times to the notifications' histograms in one upsert.
async fn add_accepts(tx: &Transaction<'_>, accepts: &HashMap<(Uuid, u32), u64>) -> Result<(), StoreError> {
    if accepts.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = accepts.keys().map(|(id, _)| *id).collect();
    let after: Vec<i32> = accepts.keys().map(|(_, after)| *after as i32).collect();
    let counts: Vec<i64> = accepts.values().map(|&count| count as i64).collect();
    tx.execute_typed(
        "INSERT INTO notification_accepts (notification_id, after_ms, accepted)
         SELECT * FROM unnest($1::uuid[], $2::integer[], $3::bigint[])
         ON CONFLICT (notification_id, after_ms)
         DO UPDATE SET accepted = notification_accepts.accepted + EXCLUDED.accepted",
        &[
            (&ids, Type::UUID_ARRAY),
            (&after, Type::INT4_ARRAY),
            (&counts, Type::INT8_ARRAY),
        ],
    )
    .await?;
    Ok(())
}

/// A notification's counts on one platform from the reports counted in one
/// write.
#[derive(Debug, Default)]
struct Totals {
    sent: i64,
    failed: i64,
    invalid: i64,
    unregistered: i64,
    expired: i64,
    dry_run: i64,
    cancelled: i64,
    held_back: i64,
    batches: i64,
}

impl Totals {
    fn add(&mut self, c: &DeliveryCounts) {
        self.sent += i64::from(c.sent);
        self.failed += i64::from(c.failed);
        self.invalid += i64::from(c.invalid);
        self.unregistered += i64::from(c.unregistered);
        self.expired += i64::from(c.expired);
        self.dry_run += i64::from(c.dry_run);
        self.cancelled += i64::from(c.cancelled);
        self.held_back += i64::from(c.held_back);
        self.batches += 1;
    }
}

/// A locked notification as token cleanup sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanupView {
    /// When it was sent (a scheduled one: when it fired): registrations
    /// renewed since are never deleted.
    pub sent_at: DateTime<Utc>,
    /// `delete` / `keep` once complete, `None` before.
    pub decision: Option<String>,
    /// Segments whose tokens are kept.
    pub suspect_segments: Vec<String>,
}

/// Locks the notification row for the rest of `tx`.
pub async fn lock(tx: &Transaction<'_>, id: Uuid) -> Result<Option<CleanupView>, StoreError> {
    let row = tx
        .query_opt(
            "SELECT coalesce(fired_at, created_at), invalid_decision, suspect_segments
               FROM notifications WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .await?;
    Ok(row.map(|row| CleanupView {
        sent_at: row.get(0),
        decision: row.get(1),
        suspect_segments: row.get(2),
    }))
}

/// Holds tokens the providers called gone or invalid (`reason`) until the
/// notification's decision; returns how many were new.
pub async fn hold_tokens(
    tx: &Transaction<'_>,
    id: Uuid,
    reason: &str,
    segment: &str,
    tokens: &[String],
) -> Result<u64, StoreError> {
    Ok(tx
        .execute(
            "INSERT INTO held_tokens (notification_id, token, reason, segment)
             SELECT $1, unnest($2::text[]), $3, $4 ON CONFLICT DO NOTHING",
            &[&id, &tokens, &reason, &segment],
        )
        .await?)
}

/// What one segment's pushes came to, for the safety valve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentCounts {
    pub segment: String,
    /// Pushes that got an answer or gave up: sent, failed, invalid, gone.
    pub attempted: u64,
    pub gone: u64,
    pub invalid: u64,
    /// Pushes a dispatcher's breaker held back.
    pub held_back: u64,
}

/// The notification's pushes per segment (from its batch reports).
pub async fn segment_counts(tx: &Transaction<'_>, id: Uuid) -> Result<Vec<SegmentCounts>, StoreError> {
    let rows = tx
        .query(
            "SELECT segment, sum(sent + failed + invalid + unregistered)::bigint, sum(unregistered)::bigint,
                    sum(invalid)::bigint, sum(held_back)::bigint
               FROM delivery_batches WHERE notification_id = $1 GROUP BY segment ORDER BY segment",
            &[&id],
        )
        .await?;
    let count = |row: &tokio_postgres::Row, i: usize| row.get::<_, Option<i64>>(i).unwrap_or(0).max(0) as u64;
    Ok(rows
        .iter()
        .map(|row| SegmentCounts {
            segment: row.get(0),
            attempted: count(row, 1),
            gone: count(row, 2),
            invalid: count(row, 3),
            held_back: count(row, 4),
        })
        .collect())
}

/// A notification whose every job and batch is accounted for and which has
/// no invalid-token decision yet: the figures completing it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// When it was sent (a scheduled one: when it fired).
    pub sent_at: DateTime<Utc>,
    pub audience: u64,
    pub invalid: u64,
    pub unregistered: u64,
}

/// The notification's figures if it is finished and not completed yet.
pub async fn finished(tx: &Transaction<'_>, id: Uuid) -> Result<Option<Finished>, StoreError> {
    let row = tx
        .query_typed_opt(
            "SELECT coalesce(fired_at, created_at) AS sent_at, p.audience, p.invalid, p.unregistered
               FROM notifications
              CROSS JOIN LATERAL (
                    SELECT coalesce(sum(audience), 0)::bigint AS audience, coalesce(sum(invalid), 0)::bigint AS invalid,
                           coalesce(sum(unregistered), 0)::bigint AS unregistered
                      FROM notification_platforms WHERE notification_id = notifications.id) p
              WHERE id = $1 AND invalid_decision IS NULL AND jobs_planned > 0
                AND jobs_done + jobs_failed >= jobs_planned AND batches_reported >= batches_expected",
            &[(&id, Type::UUID)],
        )
        .await?;
    let count = |row: &tokio_postgres::Row, name: &str| row.get::<_, i64>(name).max(0) as u64;
    Ok(row.map(|row| Finished {
        sent_at: row.get("sent_at"),
        audience: count(&row, "audience"),
        invalid: count(&row, "invalid"),
        unregistered: count(&row, "unregistered"),
    }))
}

/// The accept-time histogram: `(after_ms, accepted)` buckets in order.
pub async fn accept_histogram(client: &impl GenericClient, id: Uuid) -> Result<Vec<(u32, u64)>, StoreError> {
    let rows = client
        .query(
            "SELECT after_ms, accepted FROM notification_accepts WHERE notification_id = $1 ORDER BY after_ms",
            &[&id],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| {
            (
                row.get::<_, i32>(0).max(0) as u32,
                row.get::<_, i64>(1).max(0) as u64,
            )
        })
        .collect())
}

/// Takes the tokens held for the notification outside the `kept`
/// segments; the held rows of the `kept` segments stay, for an admin to
/// release or discard (`crate::api::held`).
pub async fn take_held_tokens(
    tx: &Transaction<'_>,
    id: Uuid,
    kept: &[String],
) -> Result<Vec<String>, StoreError> {
    Ok(tx
        .query(
            "DELETE FROM held_tokens WHERE notification_id = $1 AND NOT (segment = ANY($2)) RETURNING token",
            &[&id, &kept],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect())
}

/// Marks the notification complete (a cancelled or failed one keeps its
/// status) with its cleanup decision (`delete`, or `keep` when some segment
/// is suspect), the suspect segments and t50 / t90 / t99 — once: one
/// already decided is left as it is (a second cancel settles nothing
/// anew). A scheduled notification cancelled before it fired gets no
/// `completed_at`: nothing of it was ever sent, so nothing completed. A
/// failed notification completed by reports that came in late keeps its
/// status and its reason, which then says when the last report came.
pub async fn mark_complete(
    tx: &Transaction<'_>,
    id: Uuid,
    suspect_segments: &[String],
    [t50, t90, t99]: [Option<u32>; 3],
) -> Result<(), StoreError> {
    let ms = |t: Option<u32>| t.map(|ms| ms as i32);
    let decision = if suspect_segments.is_empty() {
        "delete"
    } else {
        "keep"
    };
    tx.execute(
        "UPDATE notifications
            SET status = CASE WHEN status IN ('harvesting', 'dispatching') THEN 'complete' ELSE status END,
                invalid_decision = $2, suspect_segments = $3, t50_ms = $4, t90_ms = $5, t99_ms = $6,
                completed_at = CASE WHEN send_at IS NOT NULL AND fired_at IS NULL THEN NULL ELSE now() END,
                -- Failed (by the watchdog, say), then every report came in
                -- after all: the reason says so, not only what was missing then.
                failure_reason = CASE WHEN status = 'failed' AND failure_reason IS NOT NULL
                    THEN failure_reason || format('; later every job and batch was reported, the last at %s',
                                                  to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'))
                    ELSE failure_reason END,
                updated_at = now()
          WHERE id = $1 AND invalid_decision IS NULL",
        &[&id, &decision, &suspect_segments, &ms(t50), &ms(t90), &ms(t99)],
    )
    .await?;
    Ok(())
}

/// Tokens deleted per statement.
const DELETE_CHUNK: usize = 10_000;

/// Deletes the registrations of `tokens` in the notification's app (a
/// token gone from one app may live on in another) not renewed since
/// `sent_at`, and counts them on the notification; returns how many were
/// deleted.
pub async fn delete_registrations(
    tx: &Transaction<'_>,
    id: Uuid,
    tokens: &[String],
    sent_at: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let mut deleted = 0;
    // In chunks: a completion may delete a million held tokens, and one
    // statement per chunk stays well inside the statement timeout.
    for chunk in tokens.chunks(DELETE_CHUNK) {
        deleted += tx
            .execute(
                "DELETE FROM registrations
                  WHERE token = ANY($1) AND updated_at < $2
                    AND app = (SELECT coalesce(payload->>'app', 'default') FROM notifications WHERE id = $3)",
                &[&chunk, &sent_at, &id],
            )
            .await?;
    }
    if deleted == 0 {
        return Ok(0);
    }
    tx.execute(
        "UPDATE notifications SET registrations_deleted = registrations_deleted + $2 WHERE id = $1",
        &[&id, &(deleted as i64)],
    )
    .await?;
    Ok(deleted)
}
