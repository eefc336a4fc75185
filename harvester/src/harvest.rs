//! Harvesting one shard job: stream the job's tokens out of PostgreSQL,
//! de-duplicate them across the notification's topics, cut them into token
//! batches and publish every batch with publisher confirms.
//!
//! Memory stays flat whatever the audience: rows are streamed (never loaded
//! whole), at most one open batch per target is held, and at most
//! `publish_window` published batches wait for their confirm.

use std::collections::HashMap;

use clarion_proto::platform::token_prefix;
use clarion_proto::{ApnsEnvironment, Platform, ShardJob, TokenBatch, WebSubscription};
use clarion_runtime::PgPool;
use clarion_runtime::amqp::control::Cancellations;
use clarion_runtime::amqp::publisher::{PublishError, Publisher};
use clarion_runtime::db::DbError;
use futures::stream::FuturesUnordered;
use futures::{StreamExt, TryStreamExt};
use tokio_postgres::types::ToSql;
use tracing::field::Empty;
use tracing::{Instrument, info};

use crate::batching::{BatchCutter, BatchTotals};
use crate::ledger::{self, Entry, Ledger};
use crate::metrics;
use crate::replica::{self, Replica};

/// The harvest query of one audience: `$topics` is the topic filter, `$kind`
/// which registrations. The primary key yields rows ordered by (shard,
/// token); with several topics a device on two of them comes out twice in
/// a row and is sent once. A web row's subscription comes from
/// `web_subscriptions` (a lookup by its primary key, evaluated for web rows
/// only: the other rows stay an index-only scan of the harvest key).
macro_rules! harvest_sql {
    ($topics:literal, $kind:literal) => {
        concat!(
            "SELECT token, platform, apns_environment, locale,
                    CASE WHEN platform = 'web' THEN
                      (SELECT w.subscription::text FROM web_subscriptions w
                        WHERE w.app = registrations.app AND w.token = registrations.token)
                    END
               FROM registrations
              WHERE app = $4 AND ",
            $topics,
            " AND shard >= $2 AND shard < $3
                AND ",
            $kind,
            "
              ORDER BY shard, token"
        )
    };
}

/// An alert to one topic. Alerts go to `device` tokens only, never to
/// push-to-start ones (the key includes `kind`, migration V35, so the
/// filter keeps it an index-only scan).
pub const ONE_TOPIC: &str = harvest_sql!("topic = $1", "kind = 'device'");
/// An alert to several topics.
pub const MANY_TOPICS: &str = harvest_sql!("topic = ANY($1)", "kind = 'device'");
/// A Live Activity's start to one topic: only iOS push-to-start tokens of
/// its attributes type (`$5`), which is not in the key, so a start reads
/// the heap, over an audience small beside the alerts'.
pub const START_ONE_TOPIC: &str = harvest_sql!(
    "topic = $1",
    "kind = 'push_to_start' AND platform = 'ios' AND attributes_type = $5"
);
/// A Live Activity's start to several topics.
pub const START_MANY_TOPICS: &str = harvest_sql!(
    "topic = ANY($1)",
    "kind = 'push_to_start' AND platform = 'ios' AND attributes_type = $5"
);

#[derive(Debug, thiserror::Error)]
pub enum HarvestError {
    #[error(transparent)]
    Database(#[from] DbError),
    #[error("unexpected {column} {value:?} in registrations")]
    Corrupt { column: &'static str, value: String },
    #[error(transparent)]
    Publish(#[from] PublishError),
}

impl From<tokio_postgres::Error> for HarvestError {
    fn from(err: tokio_postgres::Error) -> Self {
        HarvestError::Database(DbError::Query(err))
    }
}

/// What a harvest needs besides the job.
#[derive(Clone)]
pub struct HarvestContext {
    pub pool: PgPool,
    pub publisher: Publisher,
    pub batch_size: usize,
    pub publish_window: usize,
    pub cancellations: Cancellations,
    /// Where the registrations are streamed from when not the primary.
    pub replica: Option<Replica>,
}

/// Harvests `job`; resolves once every batch is confirmed by the broker.
/// Nothing is harvested before the control log is read (a notification
/// cancelled while this process was down is known first); a cancelled
/// notification stops the harvest: the totals then cover the batches
/// published before the cancellation arrived. The batches the
/// [`crate::ledger`] says an earlier attempt had published (a
/// redelivery, or the same job published twice) are skipped; the totals
/// count them all the same.
pub async fn harvest(job: &ShardJob, ctx: &HarvestContext) -> Result<BatchTotals, HarvestError> {
    let mut published = BatchTotals::default();
    ctx.cancellations.up_to_date().await;
    let cancelled = || ctx.cancellations.is_cancelled(job.notification_id);
    if cancelled() {
        return Ok(published);
    }
    let already = ledger::published(&ctx.pool, job.notification_id, job.job_index).await?;
    let ledger = Ledger::open(ctx.pool.clone(), job.notification_id, job.job_index);
    let mut skipped = 0u32;
    let conn = replica::session(job, &ctx.pool, ctx.replica.as_ref()).await?;
    let first_shard = job.shards.start() as i16;
    let end = job.shards.end() as i16;
    let topics = &job.notification.topics;
    let start = job.notification.live_activity.as_ref();
    let (sql, summary, topic_param): (&str, &str, &(dyn ToSql + Sync)) = match (topics.as_slice(), start) {
        ([one], None) => (ONE_TOPIC, "SELECT registrations (one topic)", one),
        (_, None) => (MANY_TOPICS, "SELECT registrations (several topics)", topics),
        ([one], Some(_)) => (
            START_ONE_TOPIC,
            "SELECT push-to-start registrations (one topic)",
            one,
        ),
        (_, Some(_)) => (
            START_MANY_TOPICS,
            "SELECT push-to-start registrations (several topics)",
            topics,
        ),
    };
    // Lives until the stream is drained; batches are published under the
    // job's span, not under this one.
    let query_span = tracing::info_span!(
        "stream registrations",
        otel.kind = "client",
        db.system.name = "postgresql",
        db.operation.name = "SELECT",
        db.collection.name = "registrations",
        db.query.summary = summary,
        db.response.returned_rows = Empty,
    );
    let statement = conn.prepare(sql).instrument(query_span.clone()).await?;
    let app = &job.notification.app;
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![topic_param, &first_shard, &end, app];
    if let Some(start) = start {
        params.push(&start.attributes_type);
    }
    // Boxed so it can be dropped (query finished) before `conn` goes back.
    let mut rows = Box::pin(
        conn.query_raw(&statement, params)
            .instrument(query_span.clone())
            .await?,
    );
    let mut returned_rows = 0u64;

    let mut cutter = BatchCutter::new(
        job.notification_id,
        job.job_index,
        job.sent_at,
        job.notification.clone(),
        ctx.batch_size,
    );
    let mut confirms = FuturesUnordered::new();
    let mut previous = String::new();
    while let Some(row) = rows.try_next().await? {
        returned_rows += 1;
        let token: &str = row.get(0);
        if token == previous {
            continue;
        }
        previous.clear();
        previous.push_str(token);
        let platform: Platform = parse("platform", row.get(1))?;
        let environment: ApnsEnvironment = parse("apns_environment", row.get(2))?;
        let locale: Option<&str> = row.get(3);
        let subscription = match (platform, row.get::<_, Option<&str>>(4)) {
            (Platform::Web, Some(json)) => Some(serde_json::from_str::<WebSubscription>(json).map_err(
                |_| HarvestError::Corrupt {
                    column: "web_subscriptions.subscription",
                    value: token_prefix(token).to_owned(),
                },
            )?),
            // Deleted since the row was read: the registration is gone too.
            (Platform::Web, None) => continue,
            _ => None,
        };
        if let Some(batch) = cutter.push_subscribed(token, platform, environment, locale, subscription) {
            if cancelled() {
                break;
            }
            published.add(&batch);
            match publish(ctx, &batch, &already).await? {
                Some(confirm) => confirms.push(confirm),
                None => skipped += 1,
            }
            while confirms.len() >= ctx.publish_window.max(1) {
                if let Some(entry) = confirms.next().await.transpose()? {
                    ledger.record(entry).await;
                }
            }
        }
    }
    if !cancelled() {
        for batch in cutter.finish() {
            published.add(&batch);
            match publish(ctx, &batch, &already).await? {
                Some(confirm) => confirms.push(confirm),
                None => skipped += 1,
            }
        }
    }
    query_span.record("db.response.returned_rows", returned_rows);
    drop(query_span);
    while let Some(confirmed) = confirms.next().await {
        ledger.record(confirmed?).await;
    }
    // The ledger's writer may need a pooled connection: give this one back.
    drop(rows);
    drop(conn);
    ledger.close().await;
    if skipped > 0 {
        info!(
            notification.id = %job.notification_id,
            job = job.job_index,
            skipped,
            "batches an earlier attempt had published were not published again"
        );
        metrics::BATCHES_SKIPPED.get().increment(u64::from(skipped));
    }
    Ok(published)
}

/// Publishes `batch` unless an earlier attempt published the same batch;
/// the returned future resolves to its ledger entry once confirmed.
async fn publish(
    ctx: &HarvestContext,
    batch: &TokenBatch,
    already: &HashMap<u32, i64>,
) -> Result<Option<impl Future<Output = Result<Entry, PublishError>> + use<>>, HarvestError> {
    let entry = Entry::of(batch);
    if already.get(&entry.seq) == Some(&entry.digest) {
        return Ok(None);
    }
    let sent = ctx.publisher.send(&ctx.publisher.outgoing(batch)?).await?;
    Ok(Some(async move { sent.confirmed().await.map(|()| entry) }))
}

/// A stored value parsed as `T`; a value no Clarion wrote is corrupt.
fn parse<T: std::str::FromStr>(column: &'static str, value: &str) -> Result<T, HarvestError> {
    value.parse().map_err(|_| HarvestError::Corrupt {
        column,
        value: value.to_owned(),
    })
}
