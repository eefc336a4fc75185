//! Live Activities' tables (migration V36): the activities, their broadcast
//! channels (one per APNs environment), their updates and the outbox of
//! channel commands the iOS dispatcher carries out at Apple. SQL only: what
//! the rows mean is [`crate::live_activity`]'s.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::{GenericClient, Row};
use uuid::Uuid;

use super::StoreError;

/// The kinds of `live_activity_commands.kind`.
pub const CREATE_CHANNEL: &str = "create_channel";
pub const BROADCAST: &str = "broadcast";
pub const DELETE_CHANNEL: &str = "delete_channel";

/// An activity's row.
#[derive(Debug, Clone)]
pub struct ActivityRow {
    pub id: Uuid,
    pub app: String,
    pub name: String,
    pub attributes_type: String,
    pub request: Value,
    pub topics: Vec<String>,
    pub storage_policy: String,
    pub start_notification: Option<Uuid>,
    pub last_timestamp: i64,
    pub created_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub deleted_at: Option<DateTime<Utc>>,
}

const ACTIVITY_COLUMNS: &str = "id, app, name, attributes_type, request, topics, storage_policy, \
     start_notification, last_timestamp, created_at, ended_at, deleted_at";

fn activity(row: &Row) -> ActivityRow {
    ActivityRow {
        id: row.get(0),
        app: row.get(1),
        name: row.get(2),
        attributes_type: row.get(3),
        request: row.get(4),
        topics: row.get(5),
        storage_policy: row.get(6),
        start_notification: row.get(7),
        last_timestamp: row.get(8),
        created_at: row.get(9),
        ended_at: row.get(10),
        deleted_at: row.get(11),
    }
}

/// The APNs environments among the iOS push-to-start tokens of `app` with
/// `attributes_type` following any of `topics`.
pub async fn starter_environments(
    client: &impl GenericClient,
    app: &str,
    topics: &[String],
    attributes_type: &str,
) -> Result<Vec<String>, StoreError> {
    let rows = client
        .query(
            "SELECT DISTINCT apns_environment FROM registrations
              WHERE app = $1 AND topic = ANY($2) AND platform = 'ios'
                AND kind = 'push_to_start' AND attributes_type = $3
              ORDER BY apns_environment",
            &[&app, &topics, &attributes_type],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Locks `(app, environment)`'s channel count until `tx` ends and returns
/// the channels not deleted.
pub async fn lock_and_count_channels(
    client: &impl GenericClient,
    app: &str,
    environment: &str,
) -> Result<i64, StoreError> {
    client
        .execute(
            "SELECT pg_advisory_xact_lock(hashtext('live_activity_channels'), hashtext($1 || '/' || $2))",
            &[&app, &environment],
        )
        .await?;
    let row = client
        .query_one(
            "SELECT count(*) FROM live_activity_channels
              WHERE app = $1 AND environment = $2 AND state <> 'deleted'",
            &[&app, &environment],
        )
        .await?;
    Ok(row.get(0))
}

/// A new activity's row.
pub struct NewActivity<'a> {
    pub id: Uuid,
    pub app: &'a str,
    pub name: &'a str,
    pub attributes_type: &'a str,
    pub request: &'a Value,
    pub topics: &'a [String],
    pub storage_policy: &'a str,
    pub timestamp: i64,
}

pub async fn insert_activity(client: &impl GenericClient, new: &NewActivity<'_>) -> Result<(), StoreError> {
    client
        .execute(
            "INSERT INTO live_activities
                 (id, app, name, attributes_type, request, topics, storage_policy, last_timestamp)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &new.id,
                &new.app,
                &new.name,
                &new.attributes_type,
                new.request,
                &new.topics,
                &new.storage_policy,
                &new.timestamp,
            ],
        )
        .await?;
    Ok(())
}

pub async fn insert_channel(
    client: &impl GenericClient,
    activity_id: Uuid,
    environment: &str,
    app: &str,
) -> Result<(), StoreError> {
    client
        .execute(
            "INSERT INTO live_activity_channels (activity_id, environment, app) VALUES ($1, $2, $3)",
            &[&activity_id, &environment, &app],
        )
        .await?;
    Ok(())
}

/// Queues a command in the outbox; returns its id.
pub async fn insert_command(
    client: &impl GenericClient,
    activity_id: Uuid,
    environment: &str,
    kind: &str,
    update_id: Option<Uuid>,
    channel_id: Option<&str>,
) -> Result<Uuid, StoreError> {
    let id = Uuid::now_v7();
    client
        .execute(
            "INSERT INTO live_activity_commands (id, activity_id, environment, kind, update_id, channel_id)
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[&id, &activity_id, &environment, &kind, &update_id, &channel_id],
        )
        .await?;
    Ok(id)
}

/// The activity, row-locked until `tx` ends.
pub async fn lock_activity(client: &impl GenericClient, id: Uuid) -> Result<Option<ActivityRow>, StoreError> {
    let sql = format!("SELECT {ACTIVITY_COLUMNS} FROM live_activities WHERE id = $1 FOR UPDATE");
    Ok(client.query_opt(&sql, &[&id]).await?.as_ref().map(activity))
}

pub async fn get_activity(client: &impl GenericClient, id: Uuid) -> Result<Option<ActivityRow>, StoreError> {
    let sql = format!("SELECT {ACTIVITY_COLUMNS} FROM live_activities WHERE id = $1");
    Ok(client.query_opt(&sql, &[&id]).await?.as_ref().map(activity))
}

/// Gives the activity its next timestamp (and ends it for an `end`).
pub async fn advance(
    client: &impl GenericClient,
    id: Uuid,
    timestamp: i64,
    end: bool,
) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE live_activities SET last_timestamp = $2,
                    ended_at = CASE WHEN $3 THEN coalesce(ended_at, now()) ELSE ended_at END
              WHERE id = $1",
            &[&id, &timestamp, &end],
        )
        .await?;
    Ok(())
}

pub async fn mark_deleted(client: &impl GenericClient, id: Uuid) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE live_activities SET deleted_at = coalesce(deleted_at, now()) WHERE id = $1",
            &[&id],
        )
        .await?;
    Ok(())
}

pub async fn set_start_notification(
    client: &impl GenericClient,
    id: Uuid,
    notification: Uuid,
) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE live_activities SET start_notification = $2 WHERE id = $1",
            &[&id, &notification],
        )
        .await?;
    Ok(())
}

/// One of an activity's channels.
#[derive(Debug, Clone)]
pub struct ChannelRow {
    pub environment: String,
    pub channel_id: Option<String>,
    pub state: String,
    pub reason: Option<String>,
}

pub async fn channels(client: &impl GenericClient, activity_id: Uuid) -> Result<Vec<ChannelRow>, StoreError> {
    let rows = client
        .query(
            "SELECT environment, channel_id, state, reason FROM live_activity_channels
              WHERE activity_id = $1 ORDER BY environment",
            &[&activity_id],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| ChannelRow {
            environment: row.get(0),
            channel_id: row.get(1),
            state: row.get(2),
            reason: row.get(3),
        })
        .collect())
}

/// Moves a channel to `state` (with a reason), from any state but `deleted`.
pub async fn set_channel_state(
    client: &impl GenericClient,
    activity_id: Uuid,
    environment: &str,
    state: &str,
    reason: Option<&str>,
) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE live_activity_channels
                SET state = $3, reason = coalesce($4, reason),
                    deleted_at = CASE WHEN $3 = 'deleted' THEN now() ELSE deleted_at END
              WHERE activity_id = $1 AND environment = $2 AND state <> 'deleted'",
            &[&activity_id, &environment, &state, &reason],
        )
        .await?;
    Ok(())
}

/// Gives a `creating` channel its id and opens it; false when the channel
/// has an id already (or is gone).
pub async fn open_channel(
    client: &impl GenericClient,
    activity_id: Uuid,
    environment: &str,
    channel_id: &str,
) -> Result<bool, StoreError> {
    let opened = client
        .execute(
            "UPDATE live_activity_channels SET channel_id = $3, state = 'open'
              WHERE activity_id = $1 AND environment = $2 AND channel_id IS NULL AND state = 'creating'",
            &[&activity_id, &environment, &channel_id],
        )
        .await?;
    Ok(opened == 1)
}

/// Marks the channel with that id deleted (it leaves the 10,000 count).
pub async fn channel_deleted(
    client: &impl GenericClient,
    activity_id: Uuid,
    channel_id: &str,
) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE live_activity_channels SET state = 'deleted', deleted_at = now()
              WHERE activity_id = $1 AND channel_id = $2",
            &[&activity_id, &channel_id],
        )
        .await?;
    Ok(())
}

/// Queues a `delete_channel` for `channel_id` unless one is queued already.
pub async fn queue_delete_once(
    client: &impl GenericClient,
    activity_id: Uuid,
    environment: &str,
    channel_id: &str,
) -> Result<bool, StoreError> {
    let queued = client
        .execute(
            "INSERT INTO live_activity_commands (id, activity_id, environment, kind, channel_id)
             SELECT $1, $2, $3, 'delete_channel', $4
              WHERE NOT EXISTS (SELECT 1 FROM live_activity_commands
                                 WHERE activity_id = $2 AND kind = 'delete_channel' AND channel_id = $4)",
            &[&Uuid::now_v7(), &activity_id, &environment, &channel_id],
        )
        .await?;
    Ok(queued == 1)
}

/// An update as stored.
#[derive(Debug, Clone)]
pub struct UpdateRow {
    pub id: Uuid,
    pub event: String,
    pub timestamp: i64,
    pub payload: Value,
    pub priority: i16,
    pub created_at: DateTime<Utc>,
}

fn update(row: &Row) -> UpdateRow {
    UpdateRow {
        id: row.get(0),
        event: row.get(1),
        timestamp: row.get(2),
        payload: row.get(3),
        priority: row.get(4),
        created_at: row.get(5),
    }
}

pub async fn get_update(
    client: &impl GenericClient,
    activity_id: Uuid,
    id: Uuid,
) -> Result<Option<UpdateRow>, StoreError> {
    let row = client
        .query_opt(
            "SELECT id, event, \"timestamp\", payload, priority, created_at FROM live_activity_updates
              WHERE activity_id = $1 AND id = $2",
            &[&activity_id, &id],
        )
        .await?;
    Ok(row.as_ref().map(update))
}

pub async fn insert_update(
    client: &impl GenericClient,
    activity_id: Uuid,
    row: &UpdateRow,
) -> Result<(), StoreError> {
    client
        .execute(
            "INSERT INTO live_activity_updates (activity_id, id, event, \"timestamp\", payload, priority)
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &activity_id,
                &row.id,
                &row.event,
                &row.timestamp,
                &row.payload,
                &row.priority,
            ],
        )
        .await?;
    Ok(())
}

pub async fn updates(client: &impl GenericClient, activity_id: Uuid) -> Result<Vec<UpdateRow>, StoreError> {
    let rows = client
        .query(
            "SELECT id, event, \"timestamp\", payload, priority, created_at FROM live_activity_updates
              WHERE activity_id = $1 ORDER BY \"timestamp\"",
            &[&activity_id],
        )
        .await?;
    Ok(rows.iter().map(update).collect())
}

/// A command as the status shows it.
#[derive(Debug, Clone)]
pub struct CommandRow {
    pub id: Uuid,
    pub environment: String,
    pub kind: String,
    pub update_id: Option<Uuid>,
    pub published_at: Option<DateTime<Utc>>,
    pub outcome: Option<String>,
    pub status: Option<i16>,
    pub reason: Option<String>,
}

pub async fn commands(client: &impl GenericClient, activity_id: Uuid) -> Result<Vec<CommandRow>, StoreError> {
    let rows = client
        .query(
            "SELECT id, environment, kind, update_id, published_at, outcome, status, reason
               FROM live_activity_commands WHERE activity_id = $1 ORDER BY created_at, id",
            &[&activity_id],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| CommandRow {
            id: row.get(0),
            environment: row.get(1),
            kind: row.get(2),
            update_id: row.get(3),
            published_at: row.get(4),
            outcome: row.get(5),
            status: row.get(6),
            reason: row.get(7),
        })
        .collect())
}

/// A command the relay may publish now.
#[derive(Debug, Clone)]
pub struct ReadyCommand {
    pub id: Uuid,
    pub activity_id: Uuid,
    pub app: String,
    pub environment: String,
    pub kind: String,
    pub storage_policy: String,
    /// A delete's own channel id, else the channel's (a broadcast's).
    pub channel_id: Option<String>,
    pub update_id: Option<Uuid>,
    pub payload: Option<Value>,
    pub priority: Option<i16>,
}

/// Row-locks (skipping rows another relay holds) up to `limit` committed,
/// unpublished commands, oldest first; a broadcast only once its channel
/// has an id.
pub async fn claim_ready(client: &impl GenericClient, limit: i64) -> Result<Vec<ReadyCommand>, StoreError> {
    let rows = client
        .query(
            "SELECT c.id, c.activity_id, a.app, c.environment, c.kind, a.storage_policy,
                    coalesce(c.channel_id, ch.channel_id), c.update_id, u.payload, u.priority
               FROM live_activity_commands c
               JOIN live_activities a ON a.id = c.activity_id
               LEFT JOIN live_activity_channels ch
                      ON ch.activity_id = c.activity_id AND ch.environment = c.environment
               LEFT JOIN live_activity_updates u ON u.activity_id = c.activity_id AND u.id = c.update_id
              WHERE c.published_at IS NULL AND (c.kind <> 'broadcast' OR ch.channel_id IS NOT NULL)
              ORDER BY c.created_at, c.id
              LIMIT $1
              FOR UPDATE OF c SKIP LOCKED",
            &[&limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| ReadyCommand {
            id: row.get(0),
            activity_id: row.get(1),
            app: row.get(2),
            environment: row.get(3),
            kind: row.get(4),
            storage_policy: row.get(5),
            channel_id: row.get(6),
            update_id: row.get(7),
            payload: row.get(8),
            priority: row.get(9),
        })
        .collect())
}

pub async fn mark_published(client: &impl GenericClient, ids: &[Uuid]) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE live_activity_commands SET published_at = now() WHERE id = ANY($1)",
            &[&ids],
        )
        .await?;
    Ok(())
}

/// The command an outcome is recorded for, when it is recorded now.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub kind: String,
    pub environment: String,
    pub channel_id: Option<String>,
}

/// Records a command's outcome unless one is recorded already; `None`
/// when it was (or no such command exists).
pub async fn record_outcome(
    client: &impl GenericClient,
    command_id: Uuid,
    outcome: &str,
    status: Option<i16>,
    reason: Option<&str>,
) -> Result<Option<Recorded>, StoreError> {
    let row = client
        .query_opt(
            "UPDATE live_activity_commands
                SET outcome = $2, status = $3, reason = $4, outcome_at = now()
              WHERE id = $1 AND outcome_at IS NULL
              RETURNING kind, environment, channel_id",
            &[&command_id, &outcome, &status, &reason],
        )
        .await?;
    Ok(row.map(|row| Recorded {
        kind: row.get(0),
        environment: row.get(1),
        channel_id: row.get(2),
    }))
}

/// The broadcasts still waiting for a channel that will never have an id:
/// recorded as failed and taken off the relay's list.
pub async fn fail_waiting_broadcasts(
    client: &impl GenericClient,
    activity_id: Uuid,
    environment: &str,
    reason: &str,
) -> Result<u64, StoreError> {
    Ok(client
        .execute(
            "UPDATE live_activity_commands
                SET outcome = 'failed', reason = $3, outcome_at = now(), published_at = now()
              WHERE activity_id = $1 AND environment = $2 AND kind = 'broadcast'
                AND published_at IS NULL",
            &[&activity_id, &environment, &reason],
        )
        .await?)
}

/// Queues `delete_channel` for the open channels of activities that ended
/// more than `retention_secs` ago (at most `limit`), marking them
/// `deleting`; returns how many.
pub async fn sweep_ended(
    client: &impl GenericClient,
    retention_secs: f64,
    limit: i64,
) -> Result<u64, StoreError> {
    Ok(client
        .execute(
            "WITH due AS (
                 SELECT ch.activity_id, ch.environment, ch.channel_id
                   FROM live_activity_channels ch JOIN live_activities a ON a.id = ch.activity_id
                  WHERE a.ended_at < now() - make_interval(secs => $1) AND ch.state = 'open'
                  LIMIT $2
                    FOR UPDATE OF ch SKIP LOCKED),
             marked AS (
                 UPDATE live_activity_channels ch SET state = 'deleting'
                   FROM due WHERE ch.activity_id = due.activity_id AND ch.environment = due.environment)
             INSERT INTO live_activity_commands (id, activity_id, environment, kind, channel_id)
             SELECT gen_random_uuid(), activity_id, environment, 'delete_channel', channel_id FROM due",
            &[&retention_secs, &limit],
        )
        .await?)
}

/// A command's kind and environment.
pub async fn command(
    client: &impl GenericClient,
    command_id: Uuid,
) -> Result<Option<(String, String)>, StoreError> {
    let row = client
        .query_opt(
            "SELECT kind, environment FROM live_activity_commands WHERE id = $1",
            &[&command_id],
        )
        .await?;
    Ok(row.map(|row| (row.get(0), row.get(1))))
}
