//! The `registrations` table: which device token follows which topics.

use chrono::{DateTime, Utc};
use clarion_proto::{ApnsEnvironment, Platform, WebSubscription, shard_of};
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use tokio_postgres::Transaction;

use super::StoreError;

/// First key of the advisory lock that serialises writes to one token, so two
/// concurrent re-registrations cannot interleave into a union of topic sets.
const TOKEN_LOCK_CLASS: i32 = 0x436c_7201;

pub use clarion_proto::DEFAULT_APP;

/// What a device says of itself when it registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub platform: Platform,
    pub environment: ApnsEnvironment,
    /// Lower-case BCP 47 language tag.
    pub locale: Option<String>,
    /// The app reports device receipts (issue 35).
    pub receipts: bool,
    /// A web registration's push subscription, checked.
    pub subscription: Option<WebSubscription>,
}

/// A device and every topic it follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRegistration {
    pub app: String,
    pub token: String,
    pub platform: Platform,
    pub environment: ApnsEnvironment,
    pub locale: Option<String>,
    pub receipts: bool,
    /// A web registration's push subscription, as stored.
    pub subscription: Option<WebSubscription>,
    /// Sorted.
    pub topics: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Replaces the topic set of `token` (creating the registration if new) in
/// one transaction, and returns what is stored.
pub async fn replace(
    pool: &PgPool,
    app: &str,
    token: &str,
    device: &Device,
    topics: &[String],
) -> Result<StoredRegistration, StoreError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    lock_token(&tx, app, token).await?;
    tx.execute(
        "DELETE FROM registrations WHERE token = $1 AND app = $3 AND NOT (topic = ANY($2))",
        &[&token, &topics, &app],
    )
    .await?;
    upsert(&tx, app, token, device, topics).await?;
    // After the rows: deleting the old topics above may have taken the
    // previous subscription with them (see migration V31's trigger).
    write_subscription(&tx, app, token, device.subscription.as_ref()).await?;
    let stored = read(&tx, app, token).await?.ok_or(StoreError::UnknownToken)?;
    tx.commit().await?;
    Ok(stored)
}

/// Stores a web registration's subscription, or forgets the one a token
/// registered on another platform no longer has.
async fn write_subscription(
    tx: &Transaction<'_>,
    app: &str,
    token: &str,
    subscription: Option<&WebSubscription>,
) -> Result<(), StoreError> {
    match subscription {
        Some(subscription) => {
            let json =
                serde_json::to_value(subscription).map_err(|err| StoreError::Corrupt(err.to_string()))?;
            tx.execute(
                "INSERT INTO web_subscriptions (app, token, subscription) VALUES ($1, $2, $3)
                 ON CONFLICT (app, token) DO UPDATE SET subscription = EXCLUDED.subscription",
                &[&app, &token, &json],
            )
            .await?;
        }
        None => {
            tx.execute(
                "DELETE FROM web_subscriptions WHERE app = $1 AND token = $2",
                &[&app, &token],
            )
            .await?;
        }
    }
    Ok(())
}

/// Adds one topic to an existing registration.
pub async fn add_topic(
    pool: &PgPool,
    app: &str,
    token: &str,
    topic: &str,
    max_topics: u32,
) -> Result<StoredRegistration, StoreError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    lock_token(&tx, app, token).await?;
    let current = read(&tx, app, token).await?.ok_or(StoreError::UnknownToken)?;
    let is_new = !current.topics.iter().any(|t| t == topic);
    if is_new && current.topics.len() >= max_topics as usize {
        return Err(StoreError::TooManyTopics { limit: max_topics });
    }
    let device = Device {
        platform: current.platform,
        environment: current.environment,
        locale: current.locale,
        receipts: current.receipts,
        subscription: current.subscription,
    };
    upsert(&tx, app, token, &device, &[topic.to_owned()]).await?;
    let stored = read(&tx, app, token).await?.ok_or(StoreError::UnknownToken)?;
    tx.commit().await?;
    Ok(stored)
}

/// Removes one topic; true when the device followed it.
pub async fn remove_topic(pool: &PgPool, app: &str, token: &str, topic: &str) -> Result<bool, StoreError> {
    let conn = pool.get().await.map_err(DbError::from)?;
    let shard = shard_of(token) as i16;
    let removed = conn
        .execute(
            "DELETE FROM registrations WHERE app = $4 AND topic = $1 AND shard = $2 AND token = $3",
            &[&topic, &shard, &token, &app],
        )
        .await?;
    Ok(removed > 0)
}

/// The registration of `token`, if any.
pub async fn get(pool: &PgPool, app: &str, token: &str) -> Result<Option<StoredRegistration>, StoreError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    // A read-only transaction gives `read` the same interface as the writers.
    let tx = conn.build_transaction().read_only(true).start().await?;
    let stored = read(&tx, app, token).await?;
    tx.commit().await?;
    Ok(stored)
}

/// Deletes every row of `token`; returns how many topics it followed.
pub async fn delete(pool: &PgPool, app: &str, token: &str) -> Result<u64, StoreError> {
    let conn = pool.get().await.map_err(DbError::from)?;
    Ok(conn
        .execute(
            "DELETE FROM registrations WHERE token = $1 AND app = $2",
            &[&token, &app],
        )
        .await?)
}

async fn lock_token(tx: &Transaction<'_>, app: &str, token: &str) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2 || '/' || $3))",
        &[&TOKEN_LOCK_CLASS, &app, &token],
    )
    .await
    .map(|_| ())
}

/// Inserts the (token, topic) rows, refreshing platform, environment,
/// locale and `updated_at` of the rows that exist (`created_at` is kept).
async fn upsert(
    tx: &Transaction<'_>,
    app: &str,
    token: &str,
    device: &Device,
    topics: &[String],
) -> Result<(), tokio_postgres::Error> {
    let shard = shard_of(token) as i16;
    tx.execute(
        "INSERT INTO registrations (app, topic, shard, token, platform, apns_environment, locale, receipts)
         SELECT $7, topic, $2, $3, $4, $5, $6, $8 FROM unnest($1::text[]) AS topic
         ON CONFLICT (app, topic, shard, token) DO UPDATE
           SET platform = EXCLUDED.platform,
               apns_environment = EXCLUDED.apns_environment,
               locale = EXCLUDED.locale,
               receipts = EXCLUDED.receipts,
               updated_at = now()",
        &[
            &topics,
            &shard,
            &token,
            &device.platform.as_str(),
            &device.environment.as_str(),
            &device.locale,
            &app,
            &device.receipts,
        ],
    )
    .await
    .map(|_| ())
}

async fn read(
    tx: &Transaction<'_>,
    app: &str,
    token: &str,
) -> Result<Option<StoredRegistration>, StoreError> {
    let rows = tx
        .query(
            "SELECT topic, platform, apns_environment, locale, created_at, updated_at, receipts
               FROM registrations WHERE token = $1 AND app = $2 ORDER BY topic",
            &[&token, &app],
        )
        .await?;
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let platform = parse_column::<Platform>(first.get("platform"))?;
    let environment = parse_column::<ApnsEnvironment>(first.get("apns_environment"))?;
    let subscription = if platform == Platform::Web {
        let row = tx
            .query_opt(
                "SELECT subscription FROM web_subscriptions WHERE app = $1 AND token = $2",
                &[&app, &token],
            )
            .await?;
        row.map(|row| serde_json::from_value::<WebSubscription>(row.get(0)))
            .transpose()
            .map_err(|err| StoreError::Corrupt(err.to_string()))?
    } else {
        None
    };
    let created_at = rows
        .iter()
        .map(|row| row.get::<_, DateTime<Utc>>("created_at"))
        .min();
    let updated_at = rows
        .iter()
        .map(|row| row.get::<_, DateTime<Utc>>("updated_at"))
        .max();
    Ok(Some(StoredRegistration {
        app: app.to_owned(),
        token: token.to_owned(),
        platform,
        environment,
        locale: first.get("locale"),
        receipts: rows.iter().any(|row| row.get::<_, bool>("receipts")),
        subscription,
        topics: rows.iter().map(|row| row.get("topic")).collect(),
        created_at: created_at.unwrap_or_default(),
        updated_at: updated_at.unwrap_or_default(),
    }))
}

/// The CHECK constraints keep these columns to known names; anything else
/// means the database was changed behind Clarion's back.
fn parse_column<T: std::str::FromStr>(value: &str) -> Result<T, StoreError>
where
    T::Err: std::fmt::Display,
{
    value
        .parse::<T>()
        .map_err(|err| StoreError::Corrupt(err.to_string()))
}
