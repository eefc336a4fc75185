//! Live Activities (issue 38): create an activity (its APNs broadcast
//! channels and, once they exist, its start push to push-to-start tokens),
//! update or end it with one broadcast per channel, read it, delete it.
//! Every answer follows a commit; the iOS dispatcher calls Apple (see
//! [`crate::live_activity`]).

use actix_web::{HttpResponse, delete, get, post, web};
use chrono::{DateTime, Utc};
use clarion_proto::live_activity::{ActivityAlert, StoragePolicy};
use clarion_runtime::db::DbError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{AppState, AppUse};
use crate::auth::{Caller, Scope};
use crate::error::{ApiError, Problem};
use crate::live_activity::ActivityError;
use crate::live_activity::create::{Activity, create};
use crate::live_activity::relay::CommandsCommitted;
use crate::live_activity::update::{Update, Updated, delete as delete_activity, update};
use crate::metrics;
use crate::store::lanes::Lane;
use crate::store::live_activities as store;
use crate::store::notifications as notifications_store;

/// An alert shown with a start or an update.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertBody {
    #[schema(example = "Kick-off")]
    pub title: String,
    #[schema(example = "England v France has started")]
    pub body: String,
}

impl From<AlertBody> for ActivityAlert {
    fn from(alert: AlertBody) -> Self {
        ActivityAlert {
            title: alert.title,
            body: alert.body,
        }
    }
}

/// A Live Activity to start on every phone whose push-to-start token of
/// `attributes_type` follows one of `topics`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// The app (`default` when absent).
    #[schema(example = "default")]
    pub app: Option<String>,
    /// A name for people (the console, the status); also the start push's
    /// text when there is no `alert`.
    #[schema(example = "England v France")]
    pub name: String,
    /// The app's ActivityAttributes type: only push-to-start tokens
    /// registered with it get the start.
    #[schema(example = "MatchAttributes")]
    pub attributes_type: String,
    /// The activity's fixed attributes (a JSON object).
    #[schema(value_type = Object, example = json!({"home": "England", "away": "France"}))]
    pub attributes: Value,
    /// The activity's first content state (a JSON object).
    #[schema(value_type = Object, example = json!({"home": 0, "away": 0, "minute": 0}))]
    pub content_state: Value,
    /// 1 to 20 topics, validated as a send's.
    #[schema(example = json!(["sport/football"]))]
    pub topics: Vec<String>,
    /// `none` (default) or `most-recent`: whether Apple keeps the last
    /// update for phones that were offline.
    #[schema(value_type = Option<String>, example = "most-recent")]
    pub storage_policy: Option<StoragePolicy>,
    /// Seconds after the start when the activity is shown as stale.
    pub stale_after_seconds: Option<u32>,
    pub alert: Option<AlertBody>,
    /// The start push's lane (`urgent` by default).
    #[schema(value_type = Option<Lane>, example = "urgent")]
    pub lane: Option<String>,
}

/// An update or the end of an activity, broadcast once per channel.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateRequest {
    /// Idempotency key: the same id is broadcast at most once. Generated
    /// when absent.
    pub id: Option<Uuid>,
    #[schema(value_type = Object, example = json!({"home": 1, "away": 0, "minute": 23}))]
    pub content_state: Value,
    pub alert: Option<AlertBody>,
    /// `update` (default) or `end`.
    #[schema(example = "update")]
    pub event: Option<String>,
    /// Unix seconds after which the activity shows as stale.
    pub stale_date: Option<i64>,
    /// Unix seconds when an ended activity leaves the lock screen (not
    /// before `stale_date`).
    pub dismissal_date: Option<i64>,
    /// 0 to 1: which of an app's activities shows first.
    pub relevance_score: Option<f64>,
    /// `apns-priority`: 10 (default, immediate) or 5.
    pub priority: Option<u8>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Created {
    pub id: Uuid,
}

/// One of the activity's broadcast channels.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChannelBody {
    /// `production` or `sandbox`.
    pub environment: String,
    /// `creating`, `open`, `failed`, `deleting` or `deleted`.
    pub state: String,
    /// Apple's `apns-channel-id`, once created.
    pub channel_id: Option<String>,
    pub reason: Option<String>,
}

/// One channel's answer to an update's broadcast.
#[derive(Debug, Serialize, ToSchema)]
pub struct BroadcastBody {
    pub environment: String,
    /// Null until the dispatcher reported; then `sent`, `refused` or `failed`.
    pub outcome: Option<String>,
    pub status: Option<i16>,
    pub reason: Option<String>,
    pub published: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UpdateStatus {
    pub id: Uuid,
    /// `update` or `end`.
    pub event: String,
    pub timestamp: i64,
    pub priority: i16,
    #[schema(value_type = Object)]
    pub payload: Value,
    pub created_at: DateTime<Utc>,
    pub broadcasts: Vec<BroadcastBody>,
}

/// The start push: an ordinary notification, accepted once every channel
/// has its id.
#[derive(Debug, Serialize, ToSchema)]
pub struct StartBody {
    /// The notification (`GET /api/v1/notifications/{id}`); null until
    /// the channels exist.
    pub notification_id: Option<Uuid>,
    /// Start pushes Apple accepted so far.
    pub accepted: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ActivityStatus {
    pub id: Uuid,
    pub app: String,
    pub name: String,
    pub attributes_type: String,
    pub topics: Vec<String>,
    /// `starting` (channels being created), `live`, `ended` or `deleted`.
    pub status: String,
    pub created_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub deleted_at: Option<DateTime<Utc>>,
    pub channels: Vec<ChannelBody>,
    pub start: StartBody,
    pub updates: Vec<UpdateStatus>,
}

/// Start a Live Activity: its broadcast channels are created (one per APNs
/// environment among its push-to-start tokens; production alone when there
/// are none yet), then its start push is sent to those tokens.
#[utoipa::path(
    tag = "live-activities",
    security(("api_key" = [])),
    request_body = CreateRequest,
    responses(
        (status = 201, description = "The activity, its channels and their create commands are committed", body = Created, headers(("Location" = String, description = "The activity's path, `/api/v1/live-activities/{id}`"))),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key lacks the `send` scope, or may not use the lane, the app or a topic", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The app has 10,000 channels not deleted in an APNs environment, Apple's limit", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body larger than 64 KiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A rule broken; the message names the field (`name`, `attributes_type`, `attributes`, `content_state`, `topics`, `app`, `lane`, `stale_after_seconds`; the start push over 4096 bytes)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable; nothing was committed; retry after `Retry-After`", body = Problem, content_type = "application/problem+json", headers(("Retry-After" = u64))),
    )
)]
#[post("/api/v1/live-activities")]
pub async fn create_activity(
    caller: Caller,
    state: web::Data<AppState>,
    body: web::Json<CreateRequest>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Send)?;
    let body = body.into_inner();
    let lane = match body.lane.as_deref() {
        None => Lane::Urgent,
        Some(name) => Lane::parse(name).ok_or_else(|| {
            ApiError::Invalid(format!(
                "lane {:?} is not one of urgent, standard, bulk",
                name.chars().take(32).collect::<String>()
            ))
        })?,
    };
    caller.check_lane(lane)?;
    let activity = Activity {
        app: body.app.unwrap_or_else(clarion_proto::app::default_app),
        name: body.name,
        attributes_type: body.attributes_type,
        attributes: body.attributes,
        content_state: body.content_state,
        topics: body.topics,
        storage_policy: body.storage_policy.unwrap_or_default(),
        stale_after_seconds: body.stale_after_seconds,
        alert: body.alert.map(Into::into),
        lane,
        timestamp: 0,
        key_id: caller.key_id.clone(),
        key_name: caller.key_name.clone(),
    };
    activity.validate()?;
    state.check_app(&caller, &activity.app, AppUse::Write)?;
    caller.check_topics(&activity.topics)?;
    let control = state.control()?;
    let id = Uuid::now_v7();
    let created = create(&state.pool, id, &activity).await;
    if let Err(ActivityError::Full { .. }) = &created {
        metrics::LIVE_ACTIVITY_REQUESTS.with(["full"]).increment(1);
    }
    let environments = created?;
    let _ = control.commands.try_send(CommandsCommitted);
    metrics::LIVE_ACTIVITY_REQUESTS.with(["created"]).increment(1);
    tracing::info!(live_activity.id = %id, environments = ?environments, "live activity created");
    Ok(HttpResponse::Created()
        .insert_header(("location", format!("/api/v1/live-activities/{id}")))
        .json(Created { id }))
}

/// Update or end an activity: one broadcast per channel, each phone
/// subscribed to it gets the update.
#[utoipa::path(
    tag = "live-activities",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "Live Activity id")),
    request_body = UpdateRequest,
    responses(
        (status = 202, description = "The update and its broadcasts are committed", body = Created),
        (status = 200, description = "This update id was accepted before; nothing is sent again", body = Created),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key lacks the `send` scope, or may not use the activity's app", body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The activity has ended or was deleted", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body larger than 64 KiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A rule broken; the message names the field (`content_state`, `event`, `priority`, `relevance_score`, `dismissal_date`; the payload over 4096 bytes), or the id is not a UUID", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable; nothing was committed; retry after `Retry-After`", body = Problem, content_type = "application/problem+json", headers(("Retry-After" = u64))),
    )
)]
#[post("/api/v1/live-activities/{id}/updates")]
pub async fn update_activity(
    caller: Caller,
    state: web::Data<AppState>,
    path: web::Path<Uuid>,
    body: web::Json<UpdateRequest>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Send)?;
    let activity_id = path.into_inner();
    let body = body.into_inner();
    let end = match body.event.as_deref() {
        None | Some("update") => false,
        Some("end") => true,
        Some(other) => {
            return Err(ApiError::Invalid(format!(
                "event {:?} is not one of update, end",
                other.chars().take(32).collect::<String>()
            )));
        }
    };
    let priority = body.priority.unwrap_or(10);
    if priority != 10 && priority != 5 {
        return Err(ApiError::Invalid(format!(
            "priority {priority} is not one of 10, 5"
        )));
    }
    if let Some(score) = body.relevance_score
        && !(0.0..=1.0).contains(&score)
    {
        return Err(ApiError::Invalid(format!(
            "relevance_score {score} is not from 0 to 1"
        )));
    }
    let id = body.id.unwrap_or_else(Uuid::now_v7);
    let asked = Update {
        id,
        end,
        content_state: body.content_state,
        alert: body.alert.map(Into::into),
        stale_date: body.stale_date,
        dismissal_date: body.dismissal_date,
        relevance_score: body.relevance_score,
        priority,
    };
    let control = state.control()?;
    let mut response = match update(&state.pool, activity_id, &asked, &caller).await? {
        Updated::New { broadcasts } => {
            let _ = control.commands.try_send(CommandsCommitted);
            let event = if end { "ended" } else { "updated" };
            metrics::LIVE_ACTIVITY_REQUESTS.with([event]).increment(1);
            tracing::info!(live_activity.id = %activity_id, update.id = %id, broadcasts, end, "live activity update accepted");
            HttpResponse::Accepted()
        }
        Updated::Replay => {
            metrics::LIVE_ACTIVITY_REQUESTS.with(["replayed"]).increment(1);
            HttpResponse::Ok()
        }
    };
    Ok(response.json(Created { id }))
}

/// An activity: its channels, its start push and each update with each
/// channel's answer.
#[utoipa::path(
    tag = "live-activities",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "Live Activity id")),
    responses(
        (status = 200, body = ActivityStatus),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a UUID", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable; retry after `Retry-After`", body = Problem, content_type = "application/problem+json", headers(("Retry-After" = u64))),
    )
)]
#[get("/api/v1/live-activities/{id}")]
pub async fn get_activity(
    caller: Caller,
    state: web::Data<AppState>,
    path: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Send)?;
    let id = path.into_inner();
    let conn = state.pool.get().await.map_err(DbError::from)?;
    let activity = store::get_activity(&*conn, id)
        .await?
        .ok_or(ActivityError::NotFound(id))?;
    caller.check_app(&activity.app)?;
    let channels = store::channels(&*conn, id).await?;
    let commands = store::commands(&*conn, id).await?;
    let updates = store::updates(&*conn, id).await?;
    let accepted = match activity.start_notification {
        Some(notification) => notifications_store::get(&state.pool, notification)
            .await?
            .map_or(0, |stored| stored.delivery.values().map(|d| d.sent).sum()),
        None => 0,
    };
    let status = if activity.deleted_at.is_some() {
        "deleted"
    } else if activity.ended_at.is_some() {
        "ended"
    } else if channels.iter().any(|c| c.state == "creating") {
        "starting"
    } else {
        "live"
    };
    let body = ActivityStatus {
        id,
        app: activity.app,
        name: activity.name,
        attributes_type: activity.attributes_type,
        topics: activity.topics,
        status: status.to_owned(),
        created_at: activity.created_at,
        ended_at: activity.ended_at,
        deleted_at: activity.deleted_at,
        channels: channels
            .into_iter()
            .map(|c| ChannelBody {
                environment: c.environment,
                state: c.state,
                channel_id: c.channel_id,
                reason: c.reason,
            })
            .collect(),
        start: StartBody {
            notification_id: activity.start_notification,
            accepted,
        },
        updates: updates
            .into_iter()
            .map(|u| UpdateStatus {
                broadcasts: commands
                    .iter()
                    .filter(|c| c.update_id == Some(u.id))
                    .map(|c| BroadcastBody {
                        environment: c.environment.clone(),
                        outcome: c.outcome.clone(),
                        status: c.status,
                        reason: c.reason.clone(),
                        published: c.published_at.is_some(),
                    })
                    .collect(),
                id: u.id,
                event: u.event,
                timestamp: u.timestamp,
                priority: u.priority,
                payload: u.payload,
                created_at: u.created_at,
            })
            .collect(),
    };
    Ok(HttpResponse::Ok().json(body))
}

/// Delete an activity: its channels are deleted at Apple (a channel still
/// being created, once it exists); it takes no more updates.
#[utoipa::path(
    tag = "live-activities",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "Live Activity id")),
    responses(
        (status = 202, description = "Marked deleted; the deletes of its channels are committed", body = Created),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a UUID", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable; nothing was committed; retry after `Retry-After`", body = Problem, content_type = "application/problem+json", headers(("Retry-After" = u64))),
    )
)]
#[delete("/api/v1/live-activities/{id}")]
pub async fn delete_activity_route(
    caller: Caller,
    state: web::Data<AppState>,
    path: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Send)?;
    let id = path.into_inner();
    let control = state.control()?;
    let deletes = delete_activity(&state.pool, id, &caller).await?;
    let _ = control.commands.try_send(CommandsCommitted);
    metrics::LIVE_ACTIVITY_REQUESTS.with(["deleted"]).increment(1);
    tracing::info!(live_activity.id = %id, deletes, "live activity deleted");
    Ok(HttpResponse::Accepted().json(Created { id }))
}
