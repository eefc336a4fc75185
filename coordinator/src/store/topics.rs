//! Subscriber counts per topic, read from `registrations`.

use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use serde::Serialize;

/// How many devices follow a topic, per platform.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TopicCounts {
    pub ios: u64,
    pub android: u64,
}

impl TopicCounts {
    pub fn total(self) -> u64 {
        self.ios + self.android
    }
}

/// Counts the rows of one topic (a scan of its part of the primary key and
/// of its rows). Not for the hot path: the topic counter caches it.
pub async fn count(pool: &PgPool, topic: &str) -> Result<TopicCounts, DbError> {
    let conn = pool.get().await?;
    let row = conn
        .query_one(
            "SELECT count(*) FILTER (WHERE platform = 'ios')     AS ios,
                    count(*) FILTER (WHERE platform = 'android') AS android
               FROM registrations WHERE topic = $1",
            &[&topic],
        )
        .await?;
    let ios: i64 = row.get("ios");
    let android: i64 = row.get("android");
    Ok(TopicCounts {
        ios: ios.max(0) as u64,
        android: android.max(0) as u64,
    })
}
