//! Subscriber counts per topic, read from `registrations`.

use clarion_proto::{PerPlatform, Platform};
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use tokio_postgres::GenericClient;

/// How many devices follow a topic, per platform.
pub type TopicCounts = PerPlatform<u64>;

/// Counts the rows of one topic (a scan of its part of the primary key and
/// of its rows). Not for the hot path: the topic counter caches it. A
/// platform this build does not know (a newer coordinator's) is left out.
pub async fn count(pool: &PgPool, app: &str, topic: &str) -> Result<TopicCounts, DbError> {
    let conn = pool.get().await?;
    let rows = conn
        .query(
            "SELECT platform, count(*) FROM registrations WHERE app = $2 AND topic = $1 GROUP BY platform",
            &[&topic, &app],
        )
        .await?;
    let mut counts = TopicCounts::default();
    for row in rows {
        if let Ok(platform) = row.get::<_, &str>(0).parse::<Platform>() {
            counts[platform] = row.get::<_, i64>(1).max(0) as u64;
        }
    }
    Ok(counts)
}

/// The subscribers of one topic when there are fewer than `limit`; `None`
/// when there are `limit` or more. At most `limit` index entries are read,
/// so planning can count a topic the counter has not cached yet without
/// the cost of counting a large one.
pub async fn count_below(
    client: &impl GenericClient,
    app: &str,
    topic: &str,
    limit: u64,
) -> Result<Option<u64>, tokio_postgres::Error> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let row = client
        .query_one(
            "SELECT count(*) FROM (SELECT 1 FROM registrations WHERE app = $1 AND topic = $2 LIMIT $3) AS first",
            &[&app, &topic, &limit],
        )
        .await?;
    let counted = row.get::<_, i64>(0);
    Ok((counted < limit).then_some(counted.max(0) as u64))
}

/// Most distinct topics [`search`] walks past before it stops looking.
const TOPICS_WALKED: i32 = 10_000;

/// Topics holding `text` (case-insensitive), in name order, at most `limit`.
///
/// A skip scan of the primary key: one index probe per distinct topic (a
/// recursive query), never a scan of the registrations themselves; it gives
/// up after `TOPICS_WALKED` topics.
pub async fn search(pool: &PgPool, app: &str, text: &str, limit: u32) -> Result<Vec<String>, DbError> {
    let conn = pool.get().await?;
    let rows = conn
        .query(
            "WITH RECURSIVE walk(topic, step) AS (
                 (SELECT topic, 1 FROM registrations WHERE app = $4 ORDER BY topic LIMIT 1)
                 UNION ALL
                 SELECT (SELECT r.topic FROM registrations r
                          WHERE r.app = $4 AND r.topic > w.topic ORDER BY r.topic LIMIT 1),
                        w.step + 1
                   FROM walk w
                  WHERE w.topic IS NOT NULL AND w.step < $3
             )
             SELECT topic FROM walk
              WHERE topic IS NOT NULL AND strpos(lower(topic), lower($1)) > 0
              LIMIT $2",
            &[&text, &i64::from(limit), &TOPICS_WALKED, &app],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get("topic")).collect())
}

/// Distinct devices following any of `topics` among shards `0..shard_end`
/// (all of them when `shard_end` is 1024): an index-only count.
pub async fn distinct_devices(
    pool: &PgPool,
    app: &str,
    topics: &[String],
    shard_end: i16,
) -> Result<u64, DbError> {
    let conn = pool.get().await?;
    let row = conn
        .query_one(
            "SELECT count(*) AS devices FROM (
                 SELECT DISTINCT token FROM registrations
                  WHERE app = $3 AND topic = ANY($1) AND shard < $2
             ) following",
            &[&topics, &shard_end, &app],
        )
        .await?;
    let devices: i64 = row.get("devices");
    Ok(devices.max(0) as u64)
}
