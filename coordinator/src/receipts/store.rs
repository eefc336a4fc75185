//! SQL of device receipts: the notifications receipts are for, the
//! reporting devices among the senders, the per-device rows and the
//! per-notification aggregates (counters and the delay histogram, kept after
//! the per-device rows go), and the reporting audience and verdict stored
//! once per notification.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use tokio_postgres::GenericClient;
use uuid::Uuid;

use super::body::Event;
use crate::store::StoreError;

/// A notification receipts may be recorded for.
#[derive(Debug, Clone)]
pub struct Target {
    pub id: Uuid,
    pub app: String,
    pub topics: Vec<String>,
    /// The send (the firing time of a scheduled send).
    pub sent_at: DateTime<Utc>,
}

/// What the statements below share: a notification that was sent for real
/// (not a dry run, fired if scheduled).
const SENT_FOR_REAL: &str = "NOT coalesce((n.payload->>'dry_run')::boolean, false)
                             AND (n.send_at IS NULL OR n.fired_at IS NOT NULL)";

/// The notifications of `ids` receipts count for: sent for real, details
/// still kept, and sent after `cutoff` (the detail retention; hygiene only
/// removes the details of notifications idle since before it, so a receipt
/// never writes a row hygiene has already passed over).
pub async fn targets(
    client: &impl GenericClient,
    ids: &[Uuid],
    cutoff: Option<DateTime<Utc>>,
) -> Result<HashMap<Uuid, Target>, StoreError> {
    let rows = client
        .query(
            &format!(
                "SELECT n.id, coalesce(n.payload->>'app', 'default'), n.topics, coalesce(n.fired_at, n.created_at)
                   FROM notifications n
                  WHERE n.id = ANY($1) AND n.details_removed_at IS NULL AND {SENT_FOR_REAL}
                    AND ($2::timestamptz IS NULL OR coalesce(n.fired_at, n.created_at) >= $2)"
            ),
            &[&ids, &cutoff],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| {
            let target = Target {
                id: row.get(0),
                app: row.get(1),
                topics: row.get(2),
                sent_at: row.get(3),
            };
            (target.id, target)
        })
        .collect())
}

/// Which of `tokens` are in the target's audience (registered in its app
/// to one of its topics) with a registration that says `receipts: true`.
pub async fn reporting_among(
    client: &impl GenericClient,
    target: &Target,
    tokens: &[String],
) -> Result<HashSet<String>, StoreError> {
    let rows = client
        .query(
            "SELECT DISTINCT token FROM registrations
              WHERE token = ANY($1) AND app = $2 AND topic = ANY($3) AND receipts",
            &[&tokens, &target.app, &target.topics],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Inserts a `received` row for each `(token, at)` not recorded yet;
/// returns the ones inserted. `rows` must be sorted by token (concurrent
/// writers then lock in the same order).
pub async fn insert_received(
    client: &impl GenericClient,
    id: Uuid,
    rows: &[(String, DateTime<Utc>)],
) -> Result<HashMap<String, DateTime<Utc>>, StoreError> {
    token_times(
        client,
        "INSERT INTO device_receipts (notification_id, token, received_at)
         SELECT $1, token, at FROM unnest($2::text[], $3::timestamptz[]) AS r(token, at)
         ON CONFLICT (notification_id, token) DO NOTHING
         RETURNING token, received_at",
        id,
        rows,
    )
    .await
}

/// Sets `opened_at` of each device's row that has none; returns the ones
/// set. The rows exist (inserted first); `rows` sorted by token.
pub async fn mark_opened(
    client: &impl GenericClient,
    id: Uuid,
    rows: &[(String, DateTime<Utc>)],
) -> Result<HashMap<String, DateTime<Utc>>, StoreError> {
    token_times(
        client,
        "UPDATE device_receipts d SET opened_at = r.at
           FROM unnest($2::text[], $3::timestamptz[]) AS r(token, at)
          WHERE d.notification_id = $1 AND d.token = r.token AND d.opened_at IS NULL
         RETURNING d.token, d.opened_at",
        id,
        rows,
    )
    .await
}

/// Runs `sql` over notification `id` ($1) and `rows` as two arrays
/// (tokens $2, times $3); returns the `(token, time)` rows it gives back.
async fn token_times(
    client: &impl GenericClient,
    sql: &str,
    id: Uuid,
    rows: &[(String, DateTime<Utc>)],
) -> Result<HashMap<String, DateTime<Utc>>, StoreError> {
    let (tokens, times): (Vec<&str>, Vec<DateTime<Utc>>) =
        rows.iter().map(|(t, at)| (t.as_str(), *at)).unzip();
    let returned = client.query(sql, &[&id, &tokens, &times]).await?;
    Ok(returned.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// What one request adds to a notification's aggregates.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Increments {
    pub received: i64,
    pub opened: i64,
    pub received_in_two: i64,
    /// `(event, bin lower edge ms) → count`.
    pub delays: HashMap<(Event, i64), i64>,
}

/// Adds `inc` to the notification's counters (in `slot`) and histogram.
pub async fn add_aggregates(
    client: &impl GenericClient,
    id: Uuid,
    slot: i16,
    inc: &Increments,
) -> Result<(), StoreError> {
    if inc.received == 0 && inc.opened == 0 {
        return Ok(());
    }
    client
        .execute(
            "INSERT INTO notification_receipt_counts AS c (notification_id, slot, received, opened, received_in_two)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (notification_id, slot) DO UPDATE
               SET received = c.received + EXCLUDED.received,
                   opened = c.opened + EXCLUDED.opened,
                   received_in_two = c.received_in_two + EXCLUDED.received_in_two",
            &[&id, &slot, &inc.received, &inc.opened, &inc.received_in_two],
        )
        .await?;
    let mut delays: Vec<(&str, i64, i64)> = inc
        .delays
        .iter()
        .map(|((event, edge), count)| (event.as_str(), *edge, *count))
        .collect();
    delays.sort_unstable();
    let events: Vec<&str> = delays.iter().map(|d| d.0).collect();
    let edges: Vec<i64> = delays.iter().map(|d| d.1).collect();
    let counts: Vec<i64> = delays.iter().map(|d| d.2).collect();
    client
        .execute(
            "INSERT INTO notification_receipt_delays AS d (notification_id, event, after_ms, slot, count)
             SELECT $1, event, after_ms, $2, count
               FROM unnest($3::text[], $4::bigint[], $5::bigint[]) AS r(event, after_ms, count)
             ON CONFLICT (notification_id, event, after_ms, slot) DO UPDATE
               SET count = d.count + EXCLUDED.count",
            &[&id, &slot, &events, &edges, &counts],
        )
        .await?;
    Ok(())
}

/// A notification's device-side aggregates as stored.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Aggregates {
    /// The reporting audience, once counted.
    pub reporting: Option<u64>,
    /// The stored verdict, once two minutes passed and it was stored.
    pub ninety_in_two: Option<bool>,
    pub received: u64,
    pub opened: u64,
    pub received_in_two: u64,
    /// `(bin lower edge ms, count)` sorted by edge.
    pub received_bins: Vec<(i64, u64)>,
    pub opened_bins: Vec<(i64, u64)>,
}

fn count(value: i64) -> u64 {
    value.max(0) as u64
}

/// The aggregates of `id` (all zero when no receipt came).
pub async fn aggregates(client: &impl GenericClient, id: Uuid) -> Result<Aggregates, StoreError> {
    let mut found = Aggregates::default();
    if let Some(row) = client
        .query_opt(
            "SELECT reporting, ninety_in_two FROM notification_device_summary WHERE notification_id = $1",
            &[&id],
        )
        .await?
    {
        found.reporting = Some(count(row.get(0)));
        found.ninety_in_two = row.get(1);
    }
    let row = client
        .query_one(
            "SELECT coalesce(sum(received), 0)::bigint, coalesce(sum(opened), 0)::bigint,
                    coalesce(sum(received_in_two), 0)::bigint
               FROM notification_receipt_counts WHERE notification_id = $1",
            &[&id],
        )
        .await?;
    found.received = count(row.get(0));
    found.opened = count(row.get(1));
    found.received_in_two = count(row.get(2));
    if found.received > 0 {
        let rows = client
            .query(
                "SELECT event, after_ms, sum(count)::bigint FROM notification_receipt_delays
                  WHERE notification_id = $1 GROUP BY event, after_ms ORDER BY after_ms",
                &[&id],
            )
            .await?;
        for row in rows {
            let bin = (row.get::<_, i64>(1), count(row.get(2)));
            match row.get::<_, &str>(0) {
                "opened" => found.opened_bins.push(bin),
                _ => found.received_bins.push(bin),
            }
        }
    }
    Ok(found)
}

/// A sent notification whose reporting audience is not counted yet, or
/// whose verdict is due and not stored yet.
#[derive(Debug, Clone)]
pub struct Unsettled {
    pub target: Target,
    pub counted: bool,
}

/// Up to `limit` notifications sent in the last day that need the settler:
/// no reporting audience yet, or two minutes past the send (and a few
/// seconds for the receipts in flight then) with someone reporting and no
/// verdict.
pub async fn unsettled(client: &impl GenericClient, limit: i64) -> Result<Vec<Unsettled>, StoreError> {
    let rows = client
        .query(
            &format!(
                "SELECT n.id, coalesce(n.payload->>'app', 'default'), n.topics,
                        coalesce(n.fired_at, n.created_at), s.notification_id IS NOT NULL
                   FROM notifications n
                   LEFT JOIN notification_device_summary s ON s.notification_id = n.id
                  WHERE n.created_at > now() - interval '31 days'
                    AND coalesce(n.fired_at, n.created_at) > now() - interval '1 day'
                    AND {SENT_FOR_REAL}
                    AND (s.notification_id IS NULL
                         OR (s.ninety_in_two IS NULL AND s.reporting > 0
                             AND coalesce(n.fired_at, n.created_at) < now() - interval '125 seconds'))
               ORDER BY coalesce(n.fired_at, n.created_at)
                  LIMIT $1"
            ),
            &[&limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| Unsettled {
            target: Target {
                id: row.get(0),
                app: row.get(1),
                topics: row.get(2),
                sent_at: row.get(3),
            },
            counted: row.get(4),
        })
        .collect())
}

/// The reporting audience of a send: distinct devices of its app following
/// one of its topics whose registration says `receipts: true` (an
/// index-only scan of `registrations_reporting_idx`).
pub async fn count_reporting(client: &impl GenericClient, target: &Target) -> Result<u64, StoreError> {
    let row = client
        .query_one(
            "SELECT count(DISTINCT token) FROM registrations
              WHERE app = $1 AND topic = ANY($2) AND receipts",
            &[&target.app, &target.topics],
        )
        .await?;
    Ok(count(row.get(0)))
}

/// Stores the reporting audience once (a second count is dropped).
pub async fn store_reporting(
    client: &impl GenericClient,
    id: Uuid,
    reporting: u64,
) -> Result<(), StoreError> {
    client
        .execute(
            "INSERT INTO notification_device_summary (notification_id, reporting) VALUES ($1, $2)
             ON CONFLICT (notification_id) DO NOTHING",
            &[&id, &(reporting as i64)],
        )
        .await?;
    Ok(())
}

/// Stores the verdict once; a later call changes nothing.
pub async fn store_verdict(client: &impl GenericClient, id: Uuid, verdict: bool) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE notification_device_summary SET ninety_in_two = $2
              WHERE notification_id = $1 AND ninety_in_two IS NULL",
            &[&id, &verdict],
        )
        .await?;
    Ok(())
}
