//! Updates, ends and deletes. An update is one transaction, committed
//! before the 202: its row under the caller's id (a replay finds it), a
//! timestamp greater than the activity's last, and one `broadcast` command
//! per channel that is or will be open. A delete queues a
//! `delete_channel` per open channel; a channel still being created is
//! deleted when its id arrives ([`super::report`]).

use clarion_proto::live_activity::{ActivityAlert, UpdateBody};
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use serde_json::Value;
use uuid::Uuid;

use super::create::audit_target;
use super::{ActivityError, no_nul, unix_now};
use crate::store::audit::{self, Action, Author};
use crate::store::live_activities::{self as store, BROADCAST, DELETE_CHANNEL, UpdateRow};

/// An update as asked.
#[derive(Debug, Clone)]
pub struct Update {
    pub id: Uuid,
    pub end: bool,
    pub content_state: Value,
    pub alert: Option<ActivityAlert>,
    pub stale_date: Option<i64>,
    pub dismissal_date: Option<i64>,
    pub relevance_score: Option<f64>,
    /// `apns-priority`: 10 or 5.
    pub priority: u8,
}

impl Update {
    /// The APNs body at `timestamp`, refused with the field named.
    pub fn payload(&self, timestamp: i64) -> Result<Value, ActivityError> {
        no_nul("content_state", &self.content_state)?;
        if let Some(alert) = &self.alert {
            no_nul("alert", &serde_json::json!([alert.title, alert.body]))?;
        }
        Ok(UpdateBody {
            end: self.end,
            content_state: &self.content_state,
            alert: self.alert.as_ref(),
            timestamp,
            stale_date: self.stale_date,
            dismissal_date: self.dismissal_date,
            relevance_score: self.relevance_score,
        }
        .to_json()?)
    }
}

/// What became of an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Updated {
    /// Stored now, with its broadcasts queued.
    New { broadcasts: usize },
    /// Its id was stored before; nothing was queued again.
    Replay,
}

/// The channel states a broadcast is queued for: open, or about to be.
fn takes_broadcasts(state: &str) -> bool {
    matches!(state, "creating" | "open")
}

pub async fn update(
    pool: &PgPool,
    activity_id: Uuid,
    update: &Update,
    author: &impl Author,
) -> Result<Updated, ActivityError> {
    // Checked before the transaction: a refusal costs no lock.
    update.payload(unix_now())?;
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    let activity = store::lock_activity(&tx, activity_id)
        .await?
        .ok_or(ActivityError::NotFound(activity_id))?;
    if store::get_update(&tx, activity_id, update.id).await?.is_some() {
        return Ok(Updated::Replay);
    }
    if activity.deleted_at.is_some() {
        return Err(ActivityError::Deleted(activity_id));
    }
    if activity.ended_at.is_some() {
        return Err(ActivityError::Ended(activity_id));
    }
    let timestamp = unix_now().max(activity.last_timestamp + 1);
    let row = UpdateRow {
        id: update.id,
        event: if update.end { "end" } else { "update" }.to_owned(),
        timestamp,
        payload: update.payload(timestamp)?,
        priority: i16::from(update.priority),
        created_at: chrono::Utc::now(),
    };
    store::insert_update(&tx, activity_id, &row).await?;
    store::advance(&tx, activity_id, timestamp, update.end).await?;
    let mut broadcasts = 0;
    for channel in store::channels(&tx, activity_id).await? {
        if takes_broadcasts(&channel.state) {
            store::insert_command(
                &tx,
                activity_id,
                &channel.environment,
                BROADCAST,
                Some(update.id),
                None,
            )
            .await?;
            broadcasts += 1;
        }
    }
    let detail = format!("{} {}", row.event, update.id);
    audit::record(&tx, author, Action::Send, &audit_target(activity_id), &detail).await?;
    tx.commit().await?;
    Ok(Updated::New { broadcasts })
}

/// Marks the activity deleted and queues a delete of each open channel;
/// returns how many were queued.
pub async fn delete(pool: &PgPool, activity_id: Uuid, author: &impl Author) -> Result<usize, ActivityError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    let activity = store::lock_activity(&tx, activity_id)
        .await?
        .ok_or(ActivityError::NotFound(activity_id))?;
    let mut deletes = 0;
    if activity.deleted_at.is_none() {
        store::mark_deleted(&tx, activity_id).await?;
        audit::record(&tx, author, Action::Cancel, &audit_target(activity_id), "deleted").await?;
        for channel in store::channels(&tx, activity_id).await? {
            if let ("open", Some(channel_id)) = (channel.state.as_str(), &channel.channel_id) {
                store::insert_command(
                    &tx,
                    activity_id,
                    &channel.environment,
                    DELETE_CHANNEL,
                    None,
                    Some(channel_id),
                )
                .await?;
                store::set_channel_state(&tx, activity_id, &channel.environment, "deleting", None).await?;
                deletes += 1;
            }
        }
    }
    tx.commit().await?;
    Ok(deletes)
}
