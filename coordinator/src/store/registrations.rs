//! The `registrations` table: which device token follows which topics.
//! The writers are set-based: each statement serves every device of a
//! group commit's round (arrays unnested), not one device.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use clarion_proto::{ApnsEnvironment, Platform, RegistrationKind, WebSubscription, shard_of};
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use tokio_postgres::Row;

use super::StoreError;
use super::prepared::Prepared;
use super::sql::Sql;
use crate::read_cache::notices;

/// First key of the advisory lock that serialises writes to one token, so two
/// concurrent re-registrations cannot interleave into a union of topic sets.
const TOKEN_LOCK_CLASS: i32 = 0x436c_7201;

pub use clarion_proto::DEFAULT_APP;

/// The rows of device `d` (a row of an unnested device list), as a LATERAL
/// subquery: each device is looked up on its own through the
/// `(token, topic)` index, whatever the statistics say. `OFFSET 0` keeps
/// the subquery whole (a nested loop over the devices); `app` is compared
/// with IS NOT DISTINCT FROM (the same for a NOT NULL column) so that the
/// primary key, whose first column is `app`, is never used to walk every
/// row of the app. Without it a table never analysed yet (a new
/// installation) got a plan that walked the whole app for each device,
/// 40 ms a statement at 30,000 rows instead of 0.3 ms.
const ROWS_OF_DEVICE: &str = "SELECT x.ctid AS row_id, x.* FROM registrations x
                               WHERE x.token = d.token AND x.app IS NOT DISTINCT FROM d.app";

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
    /// What the token is for (issue 38).
    pub kind: RegistrationKind,
    /// A push-to-start token's ActivityAttributes type; none otherwise.
    pub attributes_type: Option<String>,
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
    pub kind: RegistrationKind,
    pub attributes_type: Option<String>,
    /// Sorted byte by byte (whatever the database's collation).
    pub topics: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The registration of `token`, if any.
pub async fn get(pool: &PgPool, app: &str, token: &str) -> Result<Option<StoredRegistration>, StoreError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    // A read-only transaction gives the read the same interface as the writers.
    let tx = conn.build_transaction().read_only(true).start().await?;
    let mut stored = read_devices(&tx, &[(app, token)]).await?;
    tx.commit().await?;
    Ok(stored.remove(&(app.to_owned(), token.to_owned())))
}

/// A device: (app, token).
pub type DeviceKey<'a> = (&'a str, &'a str);

/// Takes the lock of every device of `devices`, one after the other in
/// the order given (the batch's sorted order, so concurrent batches lock
/// in one order and two concurrent re-registrations of one token cannot
/// interleave into a union of topic sets). One statement.
pub async fn lock_devices(tx: &impl Sql, devices: &[DeviceKey<'_>]) -> Result<(), StoreError> {
    let (apps, tokens): (Vec<&str>, Vec<&str>) = devices.iter().copied().unzip();
    // The aggregate takes the subquery's rows in their order (a sorted
    // subquery is not flattened), so the locks are taken in that order.
    tx.execute(
        "SELECT count(pg_advisory_xact_lock($1, hashtext(d.app || '/' || d.token)))
           FROM (SELECT app, token FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS u(app, token, n)
                  ORDER BY n) d",
        &[&TOKEN_LOCK_CLASS, &apps, &tokens],
    )
    .await?;
    Ok(())
}

/// Names `devices` in the registration-change notices of the transaction
/// and tells the trigger on `registrations` that they are sent (migration
/// V39: it then returns at once for the rest of the transaction). One
/// statement; the notices go out at commit, or never.
pub async fn announce(tx: &impl Sql, devices: &[DeviceKey<'_>]) -> Result<(), StoreError> {
    let payloads = notices::payloads(devices.iter().copied());
    tx.execute(
        "SELECT set_config('clarion.registration_notices', 'sent', true), pg_notify($1, payload)
           FROM unnest($2::text[]) AS payload",
        &[&notices::CHANNEL, &payloads],
    )
    .await?;
    Ok(())
}

/// Deletes every row of each device of `devices`; returns how many topics
/// each followed (devices that followed none are absent). One statement.
pub async fn delete_devices(
    tx: &impl Sql,
    devices: &[DeviceKey<'_>],
) -> Result<HashMap<(String, String), u64>, StoreError> {
    let (apps, tokens): (Vec<&str>, Vec<&str>) = devices.iter().copied().unzip();
    let rows = tx
        .query(
            &format!(
                "DELETE FROM registrations r
                  USING unnest($1::text[], $2::text[]) AS d(app, token)
                  CROSS JOIN LATERAL ({ROWS_OF_DEVICE} OFFSET 0) gone
                  WHERE r.ctid = gone.row_id
                 RETURNING r.app, r.token"
            ),
            &[&apps, &tokens],
        )
        .await?;
    let mut removed = HashMap::new();
    for row in rows {
        *removed.entry((row.get(0), row.get(1))).or_default() += 1;
    }
    Ok(removed)
}

/// Removes one topic of each device (`(app, token, topic)`, one per
/// device); returns the devices that followed it. One statement.
pub async fn remove_topics(
    tx: &impl Sql,
    rows: &[(&str, &str, &str)],
) -> Result<HashSet<(String, String)>, StoreError> {
    let shards: Vec<i16> = rows.iter().map(|(_, token, _)| shard_of(token) as i16).collect();
    let apps: Vec<&str> = rows.iter().map(|row| row.0).collect();
    let tokens: Vec<&str> = rows.iter().map(|row| row.1).collect();
    let topics: Vec<&str> = rows.iter().map(|row| row.2).collect();
    let removed = tx
        .query(
            "DELETE FROM registrations r
              USING unnest($1::text[], $2::text[], $3::int2[], $4::text[]) AS d(app, token, shard, topic)
              WHERE r.app = d.app AND r.topic = d.topic AND r.shard = d.shard AND r.token = d.token
             RETURNING r.app, r.token",
            &[&apps, &tokens, &shards, &topics],
        )
        .await?;
    Ok(removed.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// Rows to insert or refresh, as the columns one statement takes
/// ([`store_rows`]).
#[derive(Debug, Default)]
pub struct RowsToStore {
    apps: Vec<String>,
    tokens: Vec<String>,
    shards: Vec<i16>,
    topics: Vec<String>,
    platforms: Vec<&'static str>,
    environments: Vec<&'static str>,
    locales: Vec<Option<String>>,
    receipts: Vec<bool>,
    kinds: Vec<&'static str>,
    attributes_types: Vec<Option<String>>,
}

impl RowsToStore {
    /// One (device, topic) row; a statement may hold a row once only.
    pub fn push(&mut self, app: &str, token: &str, topic: &str, device: &Device) {
        self.apps.push(app.to_owned());
        self.tokens.push(token.to_owned());
        self.shards.push(shard_of(token) as i16);
        self.topics.push(topic.to_owned());
        self.platforms.push(device.platform.as_str());
        self.environments.push(device.environment.as_str());
        self.locales.push(device.locale.clone());
        self.receipts.push(device.receipts);
        self.kinds.push(device.kind.as_str());
        self.attributes_types.push(device.attributes_type.clone());
    }

    pub fn is_empty(&self) -> bool {
        self.apps.is_empty()
    }
}

/// Deletes the rows of each device whose topic is not among the device's
/// own rows of `rows` (its new topic set; every device of `rows` has at
/// least one). One statement: each device's topics are gathered into an
/// array first, so a row is checked against its own device's few topics
/// (`<> ALL`), not against every row of the round (a NOT EXISTS over the
/// whole unnest, sorted again for each device: 4.4 ms instead of 1.6 ms
/// for a round of 128 devices).
pub async fn delete_topics_not_in(tx: &impl Sql, rows: &RowsToStore) -> Result<(), StoreError> {
    tx.execute(
        &format!(
            "DELETE FROM registrations r
              USING (SELECT app, token, array_agg(topic) AS keep
                       FROM unnest($1::text[], $2::text[], $3::text[]) AS k(app, token, topic)
                      GROUP BY app, token) d
              CROSS JOIN LATERAL ({ROWS_OF_DEVICE}
                   AND x.topic <> ALL (d.keep)
                   OFFSET 0) gone
              WHERE r.ctid = gone.row_id"
        ),
        &[&rows.apps, &rows.tokens, &rows.topics],
    )
    .await?;
    Ok(())
}

/// When a device's stored rows were first and last written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowTimes {
    /// The oldest row's `created_at`.
    pub created_at: DateTime<Utc>,
    /// The newest row's `updated_at`.
    pub updated_at: DateTime<Utc>,
}

impl RowTimes {
    /// The times of a device holding the rows of both.
    pub fn and(self, other: RowTimes) -> RowTimes {
        RowTimes {
            created_at: self.created_at.min(other.created_at),
            updated_at: self.updated_at.max(other.updated_at),
        }
    }
}

/// Inserts the rows, refreshing platform, environment, locale, receipts,
/// kind, attributes type and `updated_at` of the rows that exist (`created_at` is kept). One
/// statement; returns, for each device of `rows`, the times of the rows
/// it wrote (what the answer needs, without reading the device back).
pub async fn store_rows(
    tx: &impl Sql,
    rows: &RowsToStore,
) -> Result<HashMap<(String, String), RowTimes>, StoreError> {
    let stored = tx
        .query(
            "INSERT INTO registrations (app, token, shard, topic, platform, apns_environment, locale, receipts,
                                        kind, attributes_type)
             SELECT * FROM unnest($1::text[], $2::text[], $3::int2[], $4::text[], $5::text[], $6::text[],
                                  $7::text[], $8::bool[], $9::text[], $10::text[])
             ON CONFLICT (app, topic, shard, token) DO UPDATE
               SET platform = EXCLUDED.platform,
                   apns_environment = EXCLUDED.apns_environment,
                   locale = EXCLUDED.locale,
                   receipts = EXCLUDED.receipts,
                   kind = EXCLUDED.kind,
                   attributes_type = EXCLUDED.attributes_type,
                   updated_at = now()
             RETURNING app, token, created_at, updated_at",
            &[
                &rows.apps,
                &rows.tokens,
                &rows.shards,
                &rows.topics,
                &rows.platforms,
                &rows.environments,
                &rows.locales,
                &rows.receipts,
                &rows.kinds,
                &rows.attributes_types,
            ],
        )
        .await?;
    let mut times: HashMap<(String, String), RowTimes> = HashMap::with_capacity(stored.len());
    for row in &stored {
        let row_times = RowTimes {
            created_at: row.get(2),
            updated_at: row.get(3),
        };
        times
            .entry((row.get(0), row.get(1)))
            .and_modify(|device| *device = device.and(row_times))
            .or_insert(row_times);
    }
    Ok(times)
}

/// Stores the web subscriptions of `devices` that have one and forgets
/// those of the others (a token re-registered on another platform). Two
/// statements at most, sent together; after the rows, whose deletion may have taken a
/// previous subscription with it (migration V33's trigger).
pub async fn store_subscriptions(
    tx: &Prepared<'_>,
    devices: &[(DeviceKey<'_>, Option<&WebSubscription>)],
) -> Result<(), StoreError> {
    let (mut web_apps, mut web_tokens, mut jsons) = (Vec::new(), Vec::new(), Vec::new());
    let (mut other_apps, mut other_tokens) = (Vec::new(), Vec::new());
    for ((app, token), subscription) in devices {
        match subscription {
            Some(subscription) => {
                web_apps.push(*app);
                web_tokens.push(*token);
                jsons.push(
                    serde_json::to_value(subscription).map_err(|err| StoreError::Corrupt(err.to_string()))?,
                );
            }
            None => {
                other_apps.push(*app);
                other_tokens.push(*token);
            }
        }
    }
    // Different devices: sent together, in this order.
    futures::try_join!(
        async {
            if web_apps.is_empty() {
                return Ok(0);
            }
            tx.execute(
                "INSERT INTO web_subscriptions (app, token, subscription)
                 SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[])
                 ON CONFLICT (app, token) DO UPDATE SET subscription = EXCLUDED.subscription",
                &[&web_apps, &web_tokens, &jsons],
            )
            .await
        },
        async {
            if other_apps.is_empty() {
                return Ok(0);
            }
            tx.execute(
                "DELETE FROM web_subscriptions s USING unnest($1::text[], $2::text[]) AS d(app, token)
                  WHERE s.app = d.app AND s.token = d.token",
                &[&other_apps, &other_tokens],
            )
            .await
        },
    )?;
    Ok(())
}

/// The registrations of `devices` (those with no row are absent). One
/// statement, driven by the device list (`ROWS_OF_DEVICE`).
pub async fn read_devices(
    client: &impl Sql,
    devices: &[DeviceKey<'_>],
) -> Result<HashMap<(String, String), StoredRegistration>, StoreError> {
    let (apps, tokens): (Vec<&str>, Vec<&str>) = devices.iter().copied().unzip();
    let rows = client
        .query(
            &format!(
                "SELECT r.app, r.token, r.topic, r.platform, r.apns_environment, r.locale, r.created_at,
                        r.updated_at, r.receipts, r.kind, r.attributes_type,
                        (SELECT s.subscription FROM web_subscriptions s
                          WHERE s.app = r.app AND s.token = r.token) AS subscription
                   FROM unnest($1::text[], $2::text[]) AS d(app, token)
                   CROSS JOIN LATERAL ({ROWS_OF_DEVICE} OFFSET 0) r
                  ORDER BY r.app, r.token, r.topic COLLATE \"C\""
            ),
            &[&apps, &tokens],
        )
        .await?;
    let mut stored = HashMap::with_capacity(devices.len());
    for device in rows.chunk_by(|a, b| {
        a.get::<_, &str>(0) == b.get::<_, &str>(0) && a.get::<_, &str>(1) == b.get::<_, &str>(1)
    }) {
        let registration = registration_of(device)?;
        stored.insert(
            (registration.app.clone(), registration.token.clone()),
            registration,
        );
    }
    Ok(stored)
}

/// The registration of one device from its rows (sorted by topic, at
/// least one).
fn registration_of(rows: &[Row]) -> Result<StoredRegistration, StoreError> {
    let first = &rows[0];
    let platform = parse_column::<Platform>(first.get("platform"))?;
    let environment = parse_column::<ApnsEnvironment>(first.get("apns_environment"))?;
    let kind = parse_column::<RegistrationKind>(first.get("kind"))?;
    let subscription = match first.get::<_, Option<serde_json::Value>>("subscription") {
        Some(json) if platform == Platform::Web => Some(
            serde_json::from_value::<WebSubscription>(json)
                .map_err(|err| StoreError::Corrupt(err.to_string()))?,
        ),
        _ => None,
    };
    let created_at = rows
        .iter()
        .map(|row| row.get::<_, DateTime<Utc>>("created_at"))
        .min();
    let updated_at = rows
        .iter()
        .map(|row| row.get::<_, DateTime<Utc>>("updated_at"))
        .max();
    Ok(StoredRegistration {
        app: first.get("app"),
        token: first.get("token"),
        platform,
        environment,
        locale: first.get("locale"),
        receipts: rows.iter().any(|row| row.get::<_, bool>("receipts")),
        subscription,
        kind,
        attributes_type: first.get("attributes_type"),
        topics: rows.iter().map(|row| row.get("topic")).collect(),
        created_at: created_at.unwrap_or_default(),
        updated_at: updated_at.unwrap_or_default(),
    })
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
