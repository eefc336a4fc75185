//! Notifications: the newsroom sends an alert and follows its progress.

use std::collections::BTreeMap;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, get, post, web};
use chrono::{DateTime, Utc};
use clarion_proto::presentation::sound_field;
use clarion_proto::{
    InterruptionLevel, LocalizedText, Notification, PerPlatform, Priority, PushType, WebOptions,
};
use clarion_runtime::amqp::control::publish_cancel;
use clarion_runtime::db::DbError;
use serde::{Deserialize, Serialize};
use tracing::{Instrument, info};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use super::snapshots::{answer, snapshot_of, unshared};
use super::{AppState, AppUse, platform_schema};
use crate::auth::{Caller, Scope};
use crate::error::{ApiError, Problem};
use crate::metrics;
use crate::progress::completion::announce;
use crate::progress::settle_cancelled;
use crate::progress::timings::{Timings, reachable, timings};
use crate::read_cache::snapshot::SnapshotCache;
use crate::send::accept::{AcceptError, Accepted, Sending, accept};
use crate::send::send_at::{parse_send_at, send_at_within_window};
use crate::store::audit::{self, Action};
use crate::store::lanes::Lane;
use crate::store::notifications::{self as store, Cancel, PlatformDelivery, StoredNotification};

/// A breaking-news alert (or a silent background update) for one or more
/// topics. No text field may hold a control character other than tab,
/// newline and carriage return (422). A `background` push shows nothing:
/// it takes no `title`, `body`, `image_url`, `badge`, named `sound`,
/// `category`, `interruption_level`, `relevance_score` or
/// `android_channel_id`, and goes at `normal` priority.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendRequest {
    /// Idempotency key: the same id is sent at most once. Generated when absent.
    pub id: Option<Uuid>,
    /// The app whose devices get it (`default` when absent): one the
    /// installation serves (`CLARION_APPS_FILE`), through its credentials.
    #[schema(example = "default")]
    pub app: Option<String>,
    /// 1 to 20 topics; a device following several gets one push.
    #[schema(example = json!(["breaking/uk", "breaking/us"]))]
    pub topics: Vec<String>,
    #[schema(example = "Breaking")]
    pub title: Option<String>,
    /// The alert's text; required for an alert, absent for a background push.
    #[schema(example = "Something happened")]
    #[serde(default)]
    pub body: String,
    /// Opened when the alert is tapped (http or https).
    pub link: Option<String>,
    /// Shown with the alert (http or https).
    pub image_url: Option<String>,
    /// `high` (default) or `normal`.
    #[schema(value_type = Option<String>, example = "high")]
    pub priority: Option<Priority>,
    /// Seconds the providers keep trying to reach an offline device (default 3600, at most 28 days).
    #[serde(default, deserialize_with = "whole_number")]
    pub ttl_seconds: Option<u32>,
    /// Alerts with the same key replace each other on the device.
    pub collapse_key: Option<String>,
    /// Custom key/value strings delivered with the alert. Keys the providers
    /// or Clarion use are reserved; every push also carries the
    /// notification's id as `notification_id`.
    #[serde(default)]
    pub data: BTreeMap<String, String>,
    /// Go through the whole pipeline without sending to Apple or Google.
    #[serde(default)]
    pub dry_run: bool,
    /// What the send may overtake: `urgent` (breaking news) goes before
    /// every other send, `bulk` (briefings, marketing) yields to every
    /// other; `standard` (the default) is everything else. Within a lane a
    /// smaller send overtakes a bigger one that started earlier.
    #[schema(value_type = Option<Lane>, example = "urgent")]
    pub lane: Option<String>,
    /// Send at this time instead of now (RFC 3339, in the future, at most
    /// 30 days ahead): the notification is `scheduled` until then, and may
    /// be replaced (`PUT`) or cancelled meanwhile. Its audience, TTL and
    /// timings count from when it fires. E.g. `2030-01-31T18:00:00Z` (no
    /// example is given: any fixed time leaves that window).
    #[schema(value_type = Option<String>, format = DateTime)]
    pub send_at: Option<String>,
    /// `alert` (the default) shows the text; `background` wakes the app
    /// silently to refresh its content: APNs `apns-push-type: background`,
    /// priority 5 and `content-available: 1`; FCM a data-only message at
    /// normal priority.
    #[schema(value_type = Option<String>, example = "alert")]
    pub push_type: Option<String>,
    /// The number on the app icon (iOS `aps.badge`, Android
    /// `notification_count`).
    #[schema(value_type = Option<u32>, example = 3)]
    pub badge: Option<serde_json::Number>,
    /// The sound's file name in the app bundle (iOS) or raw resources
    /// (Android); absent plays the default sound (on Android the
    /// channel's), `null` plays none.
    #[serde(default, deserialize_with = "sound_field")]
    #[schema(value_type = Option<String>, example = "default")]
    pub sound: Option<Option<String>>,
    /// The actions offered with the alert: the iOS notification category
    /// (`aps.category`) and the Android `click_action`.
    #[schema(example = "NEWS_STORY")]
    pub category: Option<String>,
    /// iOS: `passive` (quietly into the list), `active` (the default) or
    /// `time-sensitive` (through Focus). Android: notification priority
    /// low, default or high.
    #[schema(value_type = Option<String>, example = "time-sensitive")]
    pub interruption_level: Option<String>,
    /// iOS: how the alert ranks in the notification summary, 0 to 1.
    #[schema(example = 0.8)]
    pub relevance_score: Option<f64>,
    /// Android: the notification channel it is posted to.
    #[schema(example = "breaking_news")]
    pub android_channel_id: Option<String>,
    /// Web push: `{"declarative": true}` sends the Declarative Web Push
    /// form (shown by Safari without a service worker; needs `link`);
    /// otherwise the service worker gets Clarion's JSON.
    #[schema(value_type = Option<Object>, example = json!({"declarative": true}))]
    pub web: Option<WebOptions>,
    /// Texts by language (BCP 47 tag → title and body): a device whose
    /// registration names a `locale` gets the most specific match (`fr-CA`,
    /// then `fr`), any other the default `title` and `body`. Tags are
    /// compared without regard to case (so `fr` and `FR` may not both be
    /// given); at most 50.
    #[serde(default)]
    #[schema(example = json!({"fr": {"title": "Dernière minute", "body": "Il s'est passé quelque chose"}}))]
    pub localizations: BTreeMap<String, LocalizedBody>,
}

/// One language's text of a notification.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalizedBody {
    #[schema(example = "Dernière minute")]
    pub title: Option<String>,
    #[schema(example = "Il s'est passé quelque chose")]
    pub body: String,
}

/// A whole number that fits a `u32`, written as JSON writes it: JSON Schema
/// (and JavaScript) count `3600.0` as the integer 3600.
fn whole_number<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else {
        return Ok(None);
    };
    match whole_u32(&number) {
        Some(n) => Ok(Some(n)),
        None => Err(serde::de::Error::custom(format!(
            "expected a whole number from 0 to {}, got {number}",
            u32::MAX
        ))),
    }
}

/// The notification validated, for an app that exists and that the key
/// may use, and for topics the key may send to.
pub(super) fn admit(
    caller: &Caller,
    state: &AppState,
    notification: Notification,
) -> Result<Notification, ApiError> {
    let notification = notification
        .validated()
        .map_err(|err| ApiError::Invalid(err.to_string()))?;
    state.check_app(caller, &notification.app, AppUse::Write)?;
    caller.check_topics(&notification.topics)?;
    Ok(notification)
}

/// `number` as a `u32` when it is a whole number in range (`3.0` is 3).
fn whole_u32(number: &serde_json::Number) -> Option<u32> {
    let whole = number.as_u64().or_else(|| {
        number
            .as_f64()
            .filter(|n| n.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(n))
            .map(|n| n as u64)
    });
    whole.and_then(|n| u32::try_from(n).ok())
}

/// One of a field's names (`alert`, `time-sensitive`, …) read as its value.
fn read_name<T: serde::de::DeserializeOwned>(name: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
}

/// A 422 naming the field, the value (cut short) and the values it takes.
fn invalid_choice(field: &str, value: &str, choices: &str) -> ApiError {
    let value: String = value.chars().take(32).collect();
    ApiError::Invalid(format!("{field} {value:?} is not one of {choices}"))
}

/// A send request read: its parts, the notification not validated yet,
/// `send_at` not checked yet (as written).
pub(super) struct ReadRequest {
    pub id: Option<Uuid>,
    pub notification: Notification,
    pub lane: Lane,
    pub send_at: Option<String>,
}

impl SendRequest {
    pub(super) fn into_notification(self) -> Result<ReadRequest, ApiError> {
        // Read as text so an unknown lane is a 422 that names the lanes,
        // like every other rule, not a JSON error.
        let lane = match self.lane.as_deref() {
            None => Lane::default(),
            Some(name) => Lane::parse(name).ok_or_else(|| {
                ApiError::Invalid(format!(
                    "lane {:?} is not one of urgent, standard, bulk",
                    name.chars().take(32).collect::<String>()
                ))
            })?,
        };
        let push_type = match self.push_type.as_deref() {
            None => PushType::default(),
            Some(name) => {
                read_name(name).ok_or_else(|| invalid_choice("push_type", name, "alert, background"))?
            }
        };
        let interruption_level = match self.interruption_level.as_deref() {
            None => None,
            Some(name) => Some(read_name::<InterruptionLevel>(name).ok_or_else(|| {
                invalid_choice("interruption_level", name, "passive, active, time-sensitive")
            })?),
        };
        let badge = match self.badge {
            None => None,
            Some(number) => Some(whole_u32(&number).ok_or_else(|| {
                ApiError::Invalid(format!("badge is {number}; it must be a whole number from 0"))
            })?),
        };
        // Apple and Google both take background pushes at normal priority
        // only: the default follows, an explicit `high` is refused.
        let priority = match (push_type, self.priority) {
            (PushType::Background, Some(Priority::High)) => {
                return Err(ApiError::Invalid(
                    "a background push goes at normal priority: Apple and Google refuse high".into(),
                ));
            }
            (PushType::Background, _) => Priority::Normal,
            (PushType::Alert, priority) => priority.unwrap_or_default(),
        };
        let notification = Notification {
            app: self.app.unwrap_or_else(clarion_proto::app::default_app),
            topics: self.topics,
            title: self.title,
            body: self.body,
            link: self.link,
            image_url: self.image_url,
            priority,
            ttl_seconds: self
                .ttl_seconds
                .unwrap_or(clarion_proto::payload::DEFAULT_TTL_SECONDS),
            collapse_key: self.collapse_key,
            data: self.data,
            dry_run: self.dry_run,
            push_type,
            badge,
            sound: self.sound,
            category: self.category,
            interruption_level,
            relevance_score: self.relevance_score,
            android_channel_id: self.android_channel_id,
            web: self.web,
            // Set by the job relay from the lane it releases the job in.
            bulk: false,
            // Set only when an activity's start push is accepted.
            live_activity: None,
            localizations: self
                .localizations
                .into_iter()
                .map(|(tag, text)| {
                    let text = LocalizedText {
                        title: text.title,
                        body: text.body,
                    };
                    (tag, text)
                })
                .collect(),
        };
        Ok(ReadRequest {
            id: self.id,
            notification,
            lane,
            send_at: self.send_at,
        })
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Links {
    #[serde(rename = "self")]
    pub self_: String,
}

/// The answer to a send.
#[derive(Debug, Serialize, ToSchema)]
pub struct SendAccepted {
    pub id: Uuid,
    /// `harvesting` once the jobs are queued, `scheduled` when sent with a
    /// `send_at`; for a replayed id, its current status.
    #[schema(example = "harvesting")]
    pub status: String,
    pub links: Links,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct JobCounts {
    pub planned: u32,
    pub done: u32,
    pub failed: u32,
}

/// Devices harvested so far. `reachable` is `total` less the devices Apple /
/// Google reported gone (`delivery.*.unregistered`: the app is uninstalled,
/// no one can reach them); the t50 / t90 / t99 timings and 90in2 count
/// against it. Tokens refused as invalid stay in it: that answer may be
/// Clarion's own misconfiguration.
#[derive(Debug, Serialize)]
pub struct Audience {
    /// Each platform's devices, keyed by platform name.
    #[serde(flatten)]
    pub platforms: PerPlatform<u64>,
    pub total: u64,
    pub reachable: u64,
}

impl utoipa::PartialSchema for Audience {
    fn schema() -> RefOr<Schema> {
        platform_schema::object_with_platforms(
            Some(
                "Devices harvested so far. `reachable` is `total` less the devices Apple /\n\
             Google reported gone (`delivery.*.unregistered`: the app is uninstalled,\n\
             no one can reach them); the t50 / t90 / t99 timings and 90in2 count\n\
             against it. Tokens refused as invalid stay in it: that answer may be\n\
             Clarion's own misconfiguration.",
            ),
            Vec::new(),
            platform_schema::count,
            vec![
                ("total", platform_schema::count()),
                ("reachable", platform_schema::count()),
            ],
        )
    }
}

impl ToSchema for Audience {}

/// Provider-side: what Apple / Google answered, keyed by platform name.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct DeliveryBody(pub PerPlatform<PlatformDelivery>);

impl utoipa::PartialSchema for DeliveryBody {
    fn schema() -> RefOr<Schema> {
        platform_schema::object_with_platforms(
            None,
            Vec::new(),
            platform_schema::reference::<PlatformDelivery>,
            Vec::new(),
        )
    }
}

impl ToSchema for DeliveryBody {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((PlatformDelivery::name().into(), PlatformDelivery::schema()));
        <PlatformDelivery as ToSchema>::schemas(schemas);
    }
}

/// Provider-side: milliseconds from the send (the request, or the firing
/// of a scheduled notification) until half, 90% and 99% of the
/// audience was accepted (null until reached). The audience here leaves out
/// the devices Apple / Google reported gone: an uninstalled app cannot be
/// reached by anyone.
#[derive(Debug, Serialize, ToSchema)]
pub struct TimingsBody {
    pub t50_ms: Option<u32>,
    pub t90_ms: Option<u32>,
    pub t99_ms: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CleanupBody {
    /// Registrations (device × topic) deleted because their tokens are
    /// gone or invalid.
    pub registrations_deleted: u64,
    /// What became of the tokens the providers called gone or invalid:
    /// `pending` until complete (they are held); then `deleted`, or `kept`
    /// when some segment had so many that Clarion suspects its own
    /// configuration (that segment's are all kept).
    #[schema(example = "deleted")]
    pub invalid_tokens: String,
    /// True when some segment's tokens were kept for that reason.
    pub suspect_configuration: bool,
    /// The segments suspected (`ios/production`, `ios/sandbox`, `android`).
    pub suspect_segments: Vec<String>,
    /// Token cleanups that could not be recorded and were parked in the
    /// cleanup dead-letter queue (their registrations are kept).
    pub parked: u32,
}

/// What was sent: the alert's text and options as they were accepted
/// (defaults filled in), so a client can show or edit it.
#[derive(Debug, Serialize, ToSchema)]
pub struct MessageBody {
    pub title: Option<String>,
    pub body: String,
    pub link: Option<String>,
    pub image_url: Option<String>,
    #[schema(value_type = String, example = "high")]
    pub priority: Priority,
    pub ttl_seconds: u32,
    pub collapse_key: Option<String>,
    pub data: BTreeMap<String, String>,
    #[schema(value_type = String, example = "alert")]
    pub push_type: PushType,
    pub badge: Option<u32>,
    /// As sent: absent for the default sound, null for none, or its name.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub sound: Option<Option<String>>,
    pub category: Option<String>,
    #[schema(value_type = Option<String>, example = "time-sensitive")]
    pub interruption_level: Option<InterruptionLevel>,
    pub relevance_score: Option<f64>,
    pub android_channel_id: Option<String>,
    /// Web push options, as sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub web: Option<WebOptions>,
    /// Texts by lower-case language tag.
    pub localizations: BTreeMap<String, LocalizedBody>,
}

impl MessageBody {
    fn of(notification: &Notification) -> Self {
        Self {
            title: notification.title.clone(),
            body: notification.body.clone(),
            link: notification.link.clone(),
            image_url: notification.image_url.clone(),
            priority: notification.priority,
            ttl_seconds: notification.ttl_seconds,
            collapse_key: notification.collapse_key.clone(),
            data: notification.data.clone(),
            push_type: notification.push_type,
            badge: notification.badge,
            sound: notification.sound.clone(),
            category: notification.category.clone(),
            interruption_level: notification.interruption_level,
            relevance_score: notification.relevance_score,
            android_channel_id: notification.android_channel_id.clone(),
            web: notification.web,
            localizations: notification
                .localizations
                .iter()
                .map(|(tag, text)| {
                    let text = LocalizedBody {
                        title: text.title.clone(),
                        body: text.body.clone(),
                    };
                    (tag.clone(), text)
                })
                .collect(),
        }
    }
}

/// The snapshots of notifications' statuses this coordinator answers
/// (`GET /api/v1/notifications/{id}` and the history's items).
pub type StatusSnapshots = SnapshotCache<NotificationStatus>;

/// Where a notification stands.
#[derive(Debug, Serialize, ToSchema)]
pub struct NotificationStatus {
    pub id: Uuid,
    /// `accepted`, `scheduled` (waiting for `send_at`), `harvesting`,
    /// `dispatching`, `complete`, `failed` or `cancelled`.
    #[schema(example = "dispatching")]
    pub status: String,
    /// W3C trace id of the send, when traced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The app whose devices it reaches.
    #[schema(example = "default")]
    pub app: String,
    pub topics: Vec<String>,
    pub message: MessageBody,
    /// `urgent`, `standard` or `bulk`.
    pub lane: Lane,
    pub dry_run: bool,
    pub created_at: DateTime<Utc>,
    /// When it is (or was) scheduled to fire; null for a send-now.
    pub send_at: Option<DateTime<Utc>>,
    /// When a scheduled notification fired (was planned); its timings and
    /// 90in2 count from here. Null for a send-now and until it fires.
    pub fired_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    /// Why the notification failed: the watchdog's account of what never
    /// reported, or the report that was given up.
    pub failure_reason: Option<String>,
    pub jobs: JobCounts,
    /// Devices harvested so far, per platform.
    pub audience: Audience,
    pub delivery: DeliveryBody,
    /// Provider-side: share of the whole audience (`audience.total`)
    /// accepted by Apple / Google, in percent (two decimals).
    pub delivered_percent: f64,
    /// Provider-side: share of the reachable audience
    /// (`audience.reachable`: less the devices reported gone) accepted by
    /// Apple / Google, in percent (two decimals); the share the
    /// provider-side 90in2 is judged on.
    pub delivered_percent_of_reachable: f64,
    /// Provider-side timings (accepted by Apple / Google).
    pub timings: TimingsBody,
    /// Provider-side 90in2: 90% of the audience accepted by Apple / Google
    /// within two minutes of the send (the request, or the firing of a
    /// scheduled notification); null while that is still open, for a
    /// notification that never fired, and for a dry run (it pushes nothing).
    /// The device-side verdict is `device.ninety_in_two`.
    pub ninety_in_two: Option<bool>,
    /// Device-side figures: what the phones of the reporting audience said
    /// they received and opened (`POST /api/v1/receipts`). Null for a dry
    /// run and a notification that never fired.
    pub device: Option<crate::receipts::figures::DeviceFigures>,
    pub cleanup: CleanupBody,
    pub links: Links,
}

impl NotificationStatus {
    fn new(stored: StoredNotification, timings: Timings) -> Self {
        let audience = stored.audience.total();
        let reachable = reachable(audience, stored.unregistered());
        let sent = stored.delivery.values().map(|d| d.sent).sum();
        // A notification whose tokens tripped the safety valve did not reach
        // its audience as far as anyone can tell: never "90in2: yes". A dry
        // run pushes nothing, so there is no delivery to judge: null.
        let ninety_in_two = if stored.never_fired() || stored.notification.dry_run {
            None
        } else if stored.suspect_segments.is_empty() {
            timings.ninety_in_two(stored.sent_at(), stored.completed_at.is_some())
        } else {
            Some(false)
        };
        let invalid_tokens = match stored.invalid_decision.as_deref() {
            Some("delete") => "deleted",
            Some(_) => "kept",
            None => "pending",
        };
        Self {
            id: stored.id,
            status: stored.status.as_str().to_owned(),
            trace_id: stored.trace_id,
            message: MessageBody::of(&stored.notification),
            app: stored.notification.app,
            topics: stored.notification.topics,
            lane: stored.lane,
            dry_run: stored.notification.dry_run,
            created_at: stored.created_at,
            send_at: stored.send_at,
            fired_at: stored.fired_at,
            updated_at: stored.updated_at,
            completed_at: stored.completed_at,
            cancelled_at: stored.cancelled_at,
            failure_reason: stored.failure_reason,
            jobs: JobCounts {
                planned: stored.jobs_planned,
                done: stored.jobs_done,
                failed: stored.jobs_failed,
            },
            audience: Audience {
                platforms: stored.audience,
                total: audience,
                reachable,
            },
            delivery: DeliveryBody(stored.delivery),
            delivered_percent: percent(sent, audience),
            delivered_percent_of_reachable: percent(sent, reachable),
            timings: TimingsBody {
                t50_ms: timings.t50_ms,
                t90_ms: timings.t90_ms,
                t99_ms: timings.t99_ms,
            },
            ninety_in_two,
            device: None,
            cleanup: CleanupBody {
                registrations_deleted: stored.registrations_deleted,
                invalid_tokens: invalid_tokens.to_owned(),
                suspect_configuration: invalid_tokens == "kept",
                suspect_segments: stored.suspect_segments.clone(),
                parked: stored.cleanups_parked,
            },
            links: self_link(stored.id),
        }
    }
}

/// `part` as a percentage of `whole`, rounded to two decimals; 0 when
/// `whole` is 0.
fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 * 10_000.0 / whole as f64).round() / 100.0
    }
}

/// The status body, with live timings until the notification completes
/// (or its details, the accept-time histogram among them, are removed:
/// hygiene stored its timings first).
pub(super) async fn status_of(
    state: &AppState,
    stored: StoredNotification,
) -> Result<NotificationStatus, ApiError> {
    let timings = if stored.completed_at.is_some() || stored.details_removed_at.is_some() {
        Timings {
            t50_ms: stored.t50_ms,
            t90_ms: stored.t90_ms,
            t99_ms: stored.t99_ms,
        }
    } else {
        let conn = state.pool.get().await.map_err(DbError::from)?;
        let gone = stored.unregistered();
        timings(&*conn, stored.id, reachable(stored.audience.total(), gone)).await?
    };
    let device = if stored.never_fired() || stored.notification.dry_run {
        None
    } else {
        let conn = state.pool.get().await.map_err(DbError::from)?;
        Some(crate::receipts::figures::device_figures(&*conn, stored.id, stored.sent_at()).await?)
    };
    let mut status = NotificationStatus::new(stored, timings);
    status.device = device;
    Ok(status)
}

pub(super) fn self_link(id: Uuid) -> Links {
    Links {
        self_: format!("/api/v1/notifications/{id}"),
    }
}

/// Send a notification to every device following its topics.
#[utoipa::path(
    tag = "notifications",
    security(("api_key" = [])),
    request_body = SendRequest,
    responses(
        (status = 202, description = "Accepted: the notification and its shard jobs are committed; they are published to the harvesters right away, or as soon as the broker is reachable. With `send_at`: stored as `scheduled`, planned and published when that time comes", body = SendAccepted),
        (status = 200, description = "This id was sent before with the same content; nothing was sent again", body = SendAccepted),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key lacks the `send` scope, or its `lanes` leave out the lane asked for, or its `topics` one of the topics", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "This id was sent before with other content", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body larger than 64 KiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Breaks a rule stated in the request schema, the payload Apple or Google would get is too large (APNs 4096 bytes, FCM 4000 bytes: title, body, link, image_url, collapse_key and data together), or `send_at` is not an RFC 3339 time in the future and at most 30 days ahead", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The key's `sends_per_minute` is used up; retry after `Retry-After` seconds", body = Problem, content_type = "application/problem+json", headers(("Retry-After" = u64, description = "Seconds until the key may send again (at least 1)"))),
        (status = 503, description = "The database is unavailable: the plan was not committed; send the same id again", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/v1/notifications")]
pub async fn send_notification(
    caller: Caller,
    state: web::Data<AppState>,
    body: web::Json<SendRequest>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Send)?;
    let ReadRequest {
        id,
        notification,
        lane,
        send_at,
    } = body.into_inner().into_notification()?;
    caller.check_lane(lane)?;
    let notification = admit(&caller, &state, notification)?;
    // A retry of an id already stored sends nothing (a replay, or a
    // conflict): it does not count against the key's allowance, so a
    // client that lost its 202 can always ask again — even once its
    // `send_at` has passed.
    let already_stored = match id {
        Some(id) => store::get(&state.pool, id).await?.is_some(),
        None => false,
    };
    let send_at = match send_at.as_deref() {
        None => None,
        Some(text) if already_stored => Some(parse_send_at(text)?),
        Some(text) => Some(send_at_within_window(text, Utc::now())?),
    };
    if !already_stored {
        caller.check_send_rate()?;
    }
    let id = id.unwrap_or_else(Uuid::now_v7);
    let span = tracing::info_span!(
        "send notification",
        notification.id = %id,
        notification.topics = notification.topics.len(),
        notification.dry_run = notification.dry_run,
        notification.lane = %lane,
        notification.scheduled = send_at.is_some(),
    );
    let control = state.control()?;
    let sending = Sending {
        pool: &state.pool,
        topic_counter: &control.topic_counter,
        relay: &control.relay,
        tokens_per_job: state.tokens_per_job,
    };
    let accepted = accept(sending, id, notification, lane, send_at, &caller)
        .instrument(span)
        .await;
    let outcome = match &accepted {
        Ok(Accepted::New { .. }) => "accepted",
        Ok(Accepted::Replay { .. }) => "replayed",
        Err(AcceptError::Conflict(_)) => "conflict",
        Err(_) => "failed",
    };
    metrics::NOTIFICATIONS.with([outcome, lane.as_str()]).increment(1);
    let accepted = accepted?;
    let (mut response, status) = match accepted {
        Accepted::New { status } => (HttpResponse::Accepted(), status),
        Accepted::Replay { status } => (HttpResponse::Ok(), status),
    };
    let links = self_link(id);
    response.insert_header((header::LOCATION, links.self_.clone()));
    Ok(response.json(SendAccepted {
        id,
        status: status.as_str().to_owned(),
        links,
    }))
}

/// Where a notification stands: status, jobs, audience.
///
/// Answers `ETag`; send it back as `If-None-Match` to get a bodiless 304
/// while nothing changed. Computed at most once per
/// `CLARION_STATUS_REFRESH_MS` (default 1 s) per coordinator, however many
/// ask: an answer may be that much behind the database (a cancel through
/// the same coordinator shows at once).
#[utoipa::path(
    tag = "notifications",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "Notification id")),
    responses(
        (status = 200, body = NotificationStatus, headers(("ETag" = String))),
        (status = 304, description = "Unchanged since the ETag sent in If-None-Match"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a UUID", body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/v1/notifications/{id}")]
pub async fn get_notification(
    caller: Caller,
    state: web::Data<AppState>,
    snapshots: web::Data<StatusSnapshots>,
    id: web::Path<Uuid>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Send)?;
    let id = id.into_inner();
    let compute = async { snapshot_of(status_of(&state, find(&state, id).await?).await?) };
    let snapshot = snapshots.get(id, compute).await.map_err(unshared)?;
    Ok(answer(&request, &snapshot))
}

/// The notification stored as `id`; 404 when there is none.
pub(super) async fn find(state: &AppState, id: Uuid) -> Result<StoredNotification, ApiError> {
    store::get(&state.pool, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no notification {id}")))
}

/// Longest a cancel waits for the broker to confirm the cancellation.
const CANCEL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Stop a notification: no more harvesting or pushing. Pushes Apple and
/// Google already accepted stay counted as sent.
///
/// The 200 is durable: the cancellation is in the control log, which every
/// harvester and dispatcher — running, restarting or started later — reads
/// before it harvests or pushes anything. A scheduled notification
/// cancelled before its time never fires: nothing of it was published, so
/// the control log is left out.
#[utoipa::path(
    tag = "notifications",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "Notification id")),
    responses(
        (status = 200, description = "Cancelled (or already cancelled)", body = NotificationStatus),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already complete", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a UUID", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Marked cancelled (no more jobs are published), but the broker did not confirm the cancellation within 10 s; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/v1/notifications/{id}/cancel")]
pub async fn cancel_notification(
    caller: Caller,
    state: web::Data<AppState>,
    snapshots: web::Data<StatusSnapshots>,
    id: web::Path<Uuid>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Send)?;
    let id = id.into_inner();
    let mut conn = state.pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    let never_fired = match store::cancel(&tx, id).await? {
        Cancel::Unknown => return Err(ApiError::NotFound(format!("no notification {id}"))),
        Cancel::AlreadyComplete => {
            return Err(ApiError::Conflict(format!(
                "notification {id} is already complete"
            )));
        }
        Cancel::Cancelled { never_fired } => never_fired,
    };
    let detail = if never_fired { "before firing" } else { "" };
    audit::record(&tx, &caller, Action::Cancel, &id.to_string(), detail).await?;
    tx.commit().await?;
    drop(conn);
    snapshots.forget(id).await;
    if let Some(completion) = settle_cancelled(&state.pool, id, state.valve).await? {
        announce(id, &completion, state.valve);
    }
    if !never_fired {
        log_cancel(&state, id).await?;
    }
    info!(notification.id = %id, key = %caller.key_id, never_fired, "notification cancelled");
    let stored = find(&state, id).await?;
    Ok(HttpResponse::Ok().json(status_of(&state, stored).await?))
}

/// Puts the cancellation in the control log and waits for the broker's
/// confirm: every harvester and dispatcher reads the log before it
/// harvests or pushes anything (see `clarion_runtime::amqp::control`).
async fn log_cancel(state: &AppState, id: Uuid) -> Result<(), ApiError> {
    let logged = tokio::time::timeout(CANCEL_DEADLINE, publish_cancel(&state.control()?.publisher, id)).await;
    let not_logged = match logged {
        Ok(Ok(())) => None,
        Ok(Err(err)) => Some(err.to_string()),
        Err(_) => Some(format!("no confirm from the broker within {CANCEL_DEADLINE:?}")),
    };
    if let Some(reason) = not_logged {
        return Err(ApiError::Unavailable(format!(
            "notification {id} is marked cancelled and no more of its jobs will be published, \
             but the cancellation could not be logged for the harvesters and dispatchers ({reason}); retry"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::notifications::Status;
    use clarion_proto::Platform;

    fn stored(ios: PlatformDelivery, android: PlatformDelivery) -> StoredNotification {
        let notification: Notification =
            serde_json::from_str(r#"{"topics": ["breaking/uk"], "body": "hi"}"#).expect("valid notification");
        let now = Utc::now();
        let mut delivery = PerPlatform::default();
        delivery[Platform::Ios] = ios;
        delivery[Platform::Android] = android;
        StoredNotification {
            id: Uuid::nil(),
            notification,
            status: Status::Complete,
            api_key_id: "k".into(),
            trace_id: None,
            jobs_planned: 1,
            jobs_done: 1,
            jobs_failed: 0,
            // The two app platforms, 100 devices each.
            audience: PerPlatform::from_fn(|p| if p == Platform::Web { 0 } else { 100 }),
            batches_expected: 2,
            batches_reported: 2,
            delivery,
            registrations_deleted: 0,
            invalid_decision: Some("delete".into()),
            t50_ms: Some(100),
            t90_ms: Some(200),
            t99_ms: None,
            created_at: now,
            send_at: None,
            fired_at: None,
            updated_at: now,
            completed_at: Some(now),
            cancelled_at: None,
            failure_reason: None,
            cleanups_parked: 0,
            suspect_segments: vec![],
            details_removed_at: None,
            lane: Lane::Standard,
        }
    }

    #[test]
    fn delivery_is_reported_against_the_whole_and_the_reachable_audience() {
        // 200 devices: 20 gone (uninstalled), 10 invalid, 170 accepted.
        let ios = PlatformDelivery {
            sent: 80,
            unregistered: 15,
            invalid: 5,
            ..PlatformDelivery::default()
        };
        let android = PlatformDelivery {
            sent: 90,
            unregistered: 5,
            invalid: 5,
            ..PlatformDelivery::default()
        };
        let timings = Timings {
            t50_ms: Some(100),
            t90_ms: Some(200),
            t99_ms: None,
        };
        let status = NotificationStatus::new(stored(ios, android), timings);
        assert_eq!((status.audience.total, status.audience.reachable), (200, 180));
        assert_eq!(status.delivered_percent, 85.0);
        // Invalid tokens stay in the reachable audience: 170 of 180.
        assert_eq!(status.delivered_percent_of_reachable, 94.44);
        assert_eq!(status.ninety_in_two, Some(true));
    }

    #[test]
    fn a_tripped_valve_is_never_ninety_in_two() {
        let all_sent = PlatformDelivery {
            sent: 100,
            ..PlatformDelivery::default()
        };
        let mut suspect = stored(all_sent, all_sent);
        suspect.suspect_segments = vec!["android".into()];
        let timings = Timings {
            t50_ms: Some(10),
            t90_ms: Some(20),
            t99_ms: Some(30),
        };
        let status = NotificationStatus::new(suspect, timings);
        assert_eq!(status.ninety_in_two, Some(false));
        assert_eq!(status.delivered_percent_of_reachable, 100.0);
    }

    #[test]
    fn a_dry_run_has_no_ninety_in_two_verdict() {
        let mut dry_run = stored(PlatformDelivery::default(), PlatformDelivery::default());
        dry_run.notification.dry_run = true;
        let status = NotificationStatus::new(dry_run, Timings::default());
        assert_eq!(status.ninety_in_two, None);
    }

    #[test]
    fn a_ttl_is_any_whole_number_json_writes() {
        let ttl = |json: &str| {
            serde_json::from_str::<SendRequest>(&format!(
                r#"{{"topics": ["a"], "body": "b", "ttl_seconds": {json}}}"#
            ))
            .map(|request| request.ttl_seconds)
        };
        assert_eq!(ttl("3600").ok(), Some(Some(3600)));
        assert_eq!(ttl("3600.0").ok(), Some(Some(3600)));
        assert_eq!(ttl("null").ok(), Some(None));
        for refused in ["1.5", "-1", "4294967296", "1e300", "\"60\""] {
            assert!(ttl(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn percentages_of_nothing_are_zero() {
        assert_eq!(percent(0, 0), 0.0);
        assert_eq!(percent(1, 3), 33.33);
        assert_eq!(percent(2, 3), 66.67);
    }
}
