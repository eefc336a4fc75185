//! SQL of device receipts: the notifications receipts are for, the
//! reporting devices among the senders, the per-device rows and the
//! per-notification aggregates (counters and the delay histogram, kept after
//! the per-device rows go), and the reporting audience and verdict stored
//! once per notification.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use tokio_postgres::GenericClient;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::body::Event;
use crate::store::StoreError;
use crate::store::sql::Sql;

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
    client: &impl Sql,
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

/// Which `(notification, token)` pairs are in the notification's audience
/// (registered in its app to one of its topics) with a registration that
/// says `receipts: true`. One statement for every pair of a batch, driven
/// by the pairs: each (pair, topic) is one lookup, a `LIMIT 1` subquery per
/// row, so the plan is a lookup per row whatever the statistics say (a
/// join that trusted stale statistics once scanned every registration of
/// the app for each request). The lookup is an index-only scan of
/// `registrations_reporting_idx` (app, topic, token, reporting devices
/// only): a third of the primary key's size and no heap page (a quarter
/// fewer block reads than the join through the heap during a 1M-device
/// send with the storm).
pub async fn reporting_pairs(
    client: &impl Sql,
    pairs: &[(&Target, &str)],
) -> Result<HashSet<(Uuid, String)>, StoreError> {
    let mut ids = Vec::new();
    let mut apps = Vec::new();
    let mut tokens = Vec::new();
    let mut topics = Vec::new();
    for (target, token) in pairs {
        for topic in &target.topics {
            ids.push(target.id);
            apps.push(target.app.as_str());
            tokens.push(*token);
            topics.push(topic.as_str());
        }
    }
    let rows = client
        .query(
            "SELECT DISTINCT q.id, q.token
               FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) AS q(id, app, token, topic)
              CROSS JOIN LATERAL (
                    SELECT FROM registrations r
                     WHERE r.app = q.app AND r.topic = q.topic AND r.token = q.token AND r.receipts
                     LIMIT 1
                   ) AS reporting",
            &[&ids, &apps, &tokens, &topics],
        )
        .await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// A device's receipt row of a notification: `(notification, token)`.
pub type ReceiptKey = (Uuid, String);

/// Inserts a `received` row for each `(notification, token, at)` not
/// recorded yet; returns the ones inserted. `rows` sorted by
/// (notification, token), each once (concurrent writers then lock in the
/// same order). One statement.
pub async fn insert_received(
    client: &impl Sql,
    rows: &[(Uuid, &str, DateTime<Utc>)],
) -> Result<HashMap<ReceiptKey, DateTime<Utc>>, StoreError> {
    receipt_times(
        client,
        "INSERT INTO device_receipts (notification_id, token, received_at)
         SELECT id, token, at FROM unnest($1::uuid[], $2::text[], $3::timestamptz[]) AS r(id, token, at)
         ON CONFLICT (notification_id, token) DO NOTHING
         RETURNING notification_id, token, received_at",
        rows,
    )
    .await
}

/// Sets `opened_at` of each device's row that has none; returns the ones
/// set. The rows exist (inserted first); `rows` sorted, each once. One
/// statement.
pub async fn mark_opened(
    client: &impl Sql,
    rows: &[(Uuid, &str, DateTime<Utc>)],
) -> Result<HashMap<ReceiptKey, DateTime<Utc>>, StoreError> {
    receipt_times(
        client,
        "UPDATE device_receipts d SET opened_at = r.at
           FROM unnest($1::uuid[], $2::text[], $3::timestamptz[]) AS r(id, token, at)
          WHERE d.notification_id = r.id AND d.token = r.token AND d.opened_at IS NULL
         RETURNING d.notification_id, d.token, d.opened_at",
        rows,
    )
    .await
}

/// Runs `sql` over `rows` as three arrays (notifications $1, tokens $2,
/// times $3); returns the `(notification, token) → time` rows it gives back.
async fn receipt_times(
    client: &impl Sql,
    sql: &str,
    rows: &[(Uuid, &str, DateTime<Utc>)],
) -> Result<HashMap<ReceiptKey, DateTime<Utc>>, StoreError> {
    let ids: Vec<Uuid> = rows.iter().map(|row| row.0).collect();
    let tokens: Vec<&str> = rows.iter().map(|row| row.1).collect();
    let times: Vec<DateTime<Utc>> = rows.iter().map(|row| row.2).collect();
    let returned = client.query(sql, &[&ids, &tokens, &times]).await?;
    Ok(returned
        .iter()
        .map(|row| ((row.get(0), row.get(1)), row.get(2)))
        .collect())
}

/// What a batch adds to one notification's aggregates in one slot.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Increments {
    pub received: i64,
    pub opened: i64,
    pub received_in_two: i64,
    /// `(event, bin lower edge ms) → count`.
    pub delays: BTreeMap<(Event, i64), i64>,
}

/// Adds each `(notification, slot)`'s increments to its counters and its
/// histogram: two statements (sent together) for the whole batch.
/// `increments` sorted by key (one lock order).
pub async fn add_aggregates(
    client: &impl Sql,
    increments: &BTreeMap<(Uuid, i16), Increments>,
) -> Result<(), StoreError> {
    let counted: Vec<(&(Uuid, i16), &Increments)> = increments
        .iter()
        .filter(|(_, inc)| inc.received > 0 || inc.opened > 0)
        .collect();
    if counted.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = counted.iter().map(|((id, _), _)| *id).collect();
    let slots: Vec<i16> = counted.iter().map(|((_, slot), _)| *slot).collect();
    let received: Vec<i64> = counted.iter().map(|(_, inc)| inc.received).collect();
    let opened: Vec<i64> = counted.iter().map(|(_, inc)| inc.opened).collect();
    let in_two: Vec<i64> = counted.iter().map(|(_, inc)| inc.received_in_two).collect();
    let mut delay_ids = Vec::new();
    let mut delay_slots = Vec::new();
    let mut events = Vec::new();
    let mut edges = Vec::new();
    let mut counts = Vec::new();
    for ((id, slot), inc) in &counted {
        for ((event, edge), count) in &inc.delays {
            delay_ids.push(*id);
            delay_slots.push(*slot);
            events.push(event.as_str());
            edges.push(*edge);
            counts.push(*count);
        }
    }
    let counter_params: [&(dyn ToSql + Sync); 5] = [&ids, &slots, &received, &opened, &in_two];
    let delay_params: [&(dyn ToSql + Sync); 5] = [&delay_ids, &delay_slots, &events, &edges, &counts];
    let counters = client.execute(
        "INSERT INTO notification_receipt_counts AS c (notification_id, slot, received, opened, received_in_two)
         SELECT * FROM unnest($1::uuid[], $2::int2[], $3::bigint[], $4::bigint[], $5::bigint[])
         ON CONFLICT (notification_id, slot) DO UPDATE
           SET received = c.received + EXCLUDED.received,
               opened = c.opened + EXCLUDED.opened,
               received_in_two = c.received_in_two + EXCLUDED.received_in_two",
        &counter_params,
    );
    let histogram = client.execute(
        "INSERT INTO notification_receipt_delays AS d (notification_id, slot, event, after_ms, count)
         SELECT * FROM unnest($1::uuid[], $2::int2[], $3::text[], $4::bigint[], $5::bigint[])
         ON CONFLICT (notification_id, event, after_ms, slot) DO UPDATE
           SET count = d.count + EXCLUDED.count",
        &delay_params,
    );
    // Different tables: sent together, neither waits for the other.
    futures::try_join!(counters, histogram)?;
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
