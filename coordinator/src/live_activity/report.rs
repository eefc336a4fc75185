//! The iOS dispatcher's channel reports: each command's outcome recorded
//! once (`outcome_at IS NULL`), in one transaction with what it means —
//! a created channel opens with its id (an extra id, from a create carried
//! out twice, is queued for deletion), a refused or failed create fails
//! its channel, a delete (or a broadcast Apple refuses as
//! `ChannelNotRegistered` or `BadChannelId`) marks it deleted (it leaves
//! the 10,000 count) —
//! and, when the last of an activity's channels has its id, the start push
//! accepted as an ordinary notification. The caller acks after the commit.

use clarion_proto::live_activity::{ChannelOutcome, ChannelReport};
use clarion_runtime::db::DbError;
use uuid::Uuid;

use super::create::Activity;
use crate::send::accept::{AcceptError, PlanError, Sending, accept_within};
use crate::store::StoreError;
use crate::store::lanes::Lane;
use crate::store::live_activities::{self as store, BROADCAST, CREATE_CHANNEL, DELETE_CHANNEL};

/// Apple's refusals of a broadcast that mean its channel is gone.
const CHANNEL_GONE: [&str; 2] = ["ChannelNotRegistered", "BadChannelId"];

/// What recording a report did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Recorded now; `start`: the start push accepted, its lane and jobs.
    Recorded { start: Option<(Lane, u32)> },
    /// Recorded before (a redelivered report) or of no known command.
    Duplicate,
}

/// The start push's notification id: the activity's with its first six
/// bytes turned, so the same activity always gives the same one (a
/// replayed report sends nothing twice) and it keeps the UUID's version.
pub fn start_notification_id(activity_id: Uuid) -> Uuid {
    const TURN: u128 = 0x5354_4152_5450_u128 << 80;
    Uuid::from_u128(activity_id.as_u128() ^ TURN)
}

/// The outcome's columns: name, status, reason.
fn columns(outcome: &ChannelOutcome) -> (&'static str, Option<i16>, Option<&str>) {
    match outcome {
        ChannelOutcome::Created { .. } => ("created", None, None),
        ChannelOutcome::Sent => ("sent", None, None),
        ChannelOutcome::Deleted => ("deleted", None, None),
        ChannelOutcome::Refused { status, reason } => {
            ("refused", i16::try_from(*status).ok(), Some(reason.as_str()))
        }
        ChannelOutcome::Failed { error } => ("failed", None, Some(error.as_str())),
    }
}

pub async fn record(sending: Sending<'_>, report: &ChannelReport) -> Result<Fate, StoreError> {
    let mut conn = sending.pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    let activity_id = report.activity_id;
    let (outcome, status, reason) = columns(&report.outcome);
    let Some(command) = store::record_outcome(&tx, report.command_id, outcome, status, reason).await? else {
        // A create carried out twice answers twice, with two channels:
        // the one not kept is deleted.
        if let ChannelOutcome::Created { channel_id } = &report.outcome {
            delete_if_extra(&tx, report, channel_id).await?;
        }
        tx.commit().await?;
        return Ok(Fate::Duplicate);
    };
    let environment = command.environment.as_str();
    match (command.kind.as_str(), &report.outcome) {
        (CREATE_CHANNEL, ChannelOutcome::Created { channel_id }) => {
            if !store::open_channel(&tx, activity_id, environment, channel_id).await? {
                store::queue_delete_once(&tx, activity_id, environment, channel_id).await?;
            } else if store::get_activity(&tx, activity_id)
                .await?
                .is_some_and(|a| a.deleted_at.is_some())
            {
                store::queue_delete_once(&tx, activity_id, environment, channel_id).await?;
                store::set_channel_state(&tx, activity_id, environment, "deleting", None).await?;
            }
        }
        (CREATE_CHANNEL, ChannelOutcome::Refused { .. } | ChannelOutcome::Failed { .. }) => {
            let reason = reason.unwrap_or(outcome);
            store::set_channel_state(&tx, activity_id, environment, "failed", Some(reason)).await?;
            let why = format!("its channel was not created: {reason}");
            store::fail_waiting_broadcasts(&tx, activity_id, environment, &why).await?;
        }
        (DELETE_CHANNEL, ChannelOutcome::Deleted) => {
            if let Some(channel_id) = &command.channel_id {
                store::channel_deleted(&tx, activity_id, channel_id).await?;
            }
        }
        // Apple no longer knows the channel: it takes no more broadcasts
        // and leaves the 10,000 count.
        (BROADCAST, ChannelOutcome::Refused { reason, .. }) if CHANNEL_GONE.contains(&reason.as_str()) => {
            store::set_channel_state(&tx, activity_id, environment, "deleted", Some(reason)).await?;
        }
        // A broadcast's answer, or a delete that failed: recorded only.
        _ => {}
    }
    let start = if command.kind == CREATE_CHANNEL {
        start_when_ready(sending, &tx, activity_id).await?
    } else {
        None
    };
    tx.commit().await?;
    Ok(Fate::Recorded { start })
}

/// Queues a delete of `channel_id` when the create's channel kept another.
async fn delete_if_extra(
    tx: &tokio_postgres::Transaction<'_>,
    report: &ChannelReport,
    channel_id: &str,
) -> Result<(), StoreError> {
    let Some((kind, environment)) = store::command(tx, report.command_id).await? else {
        return Ok(());
    };
    let kept = store::channels(tx, report.activity_id)
        .await?
        .into_iter()
        .any(|c| c.channel_id.as_deref() == Some(channel_id));
    if kind == CREATE_CHANNEL && !kept {
        store::queue_delete_once(tx, report.activity_id, &environment, channel_id).await?;
    }
    Ok(())
}

/// Accepts the start push once no channel is being created any more and
/// one is open (once per activity, not for a deleted one).
async fn start_when_ready(
    sending: Sending<'_>,
    tx: &tokio_postgres::Transaction<'_>,
    activity_id: Uuid,
) -> Result<Option<(Lane, u32)>, StoreError> {
    let Some(row) = store::lock_activity(tx, activity_id).await? else {
        return Ok(None);
    };
    if row.start_notification.is_some() || row.deleted_at.is_some() {
        return Ok(None);
    }
    let channels = store::channels(tx, activity_id).await?;
    if channels.iter().any(|c| c.state == "creating") {
        return Ok(None);
    }
    let open = |environment: &str| {
        channels
            .iter()
            .find(|c| c.environment == environment && c.state == "open")
            .and_then(|c| c.channel_id.clone())
    };
    let (production, sandbox) = (open("production"), open("sandbox"));
    if production.is_none() && sandbox.is_none() {
        return Ok(None);
    }
    let activity: Activity =
        serde_json::from_value(row.request.clone()).map_err(|err| StoreError::Corrupt(err.to_string()))?;
    let start = activity.start(activity_id, activity.timestamp, production, sandbox);
    let notification = activity
        .start_notification(Some(start))
        .map_err(|err| StoreError::Corrupt(format!("live activity {activity_id}'s start push: {err}")))?;
    let id = start_notification_id(activity_id);
    let jobs = accept_within(sending, tx, id, &notification, activity.lane, &activity)
        .await
        .map_err(store_error)?;
    store::set_start_notification(tx, activity_id, id).await?;
    Ok(jobs.map(|jobs| (activity.lane, jobs)))
}

fn store_error(err: AcceptError) -> StoreError {
    match err {
        AcceptError::Store(err) | AcceptError::Plan(PlanError::Store(err)) => err,
        other => StoreError::Corrupt(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_push_id_is_the_activitys_turned_and_keeps_its_version() {
        let activity = Uuid::now_v7();
        let start = start_notification_id(activity);
        assert_ne!(start, activity);
        assert_eq!(start, start_notification_id(activity));
        assert_eq!(start.get_version_num(), activity.get_version_num());
        assert_eq!(start_notification_id(start), activity);
    }
}
