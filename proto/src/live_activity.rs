//! Live Activities (issue 38) on the wire: the commands the coordinator
//! asks the iOS dispatcher to carry out at Apple (create a broadcast
//! channel, broadcast an update, delete a channel) and the report of what
//! Apple answered, plus the APNs `aps` body of a start or an update and its
//! size rule. The coordinator never calls Apple itself: see
//! docs/src/api/live-activities.md#how-it-flows.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::messages::WireVersion;
use crate::payload::APNS_MAX_PAYLOAD_BYTES;
use crate::platform::ApnsEnvironment;

/// Apple's limit of broadcast channels per app and APNs environment.
pub const MAX_CHANNELS_PER_ENVIRONMENT: u32 = 10_000;

/// Channels of an ended activity are deleted this long after its end.
pub const ENDED_CHANNEL_RETENTION_SECS: u64 = 24 * 3600;

/// What Apple keeps of a channel's messages (`message-storage-policy`):
/// nothing, or the most recent one for devices that were offline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum StoragePolicy {
    #[default]
    #[serde(rename = "none")]
    None,
    #[serde(rename = "most-recent")]
    MostRecent,
}

impl StoragePolicy {
    /// The number Apple's channel-management API takes.
    pub fn apns_value(self) -> u8 {
        match self {
            StoragePolicy::None => 0,
            StoragePolicy::MostRecent => 1,
        }
    }
}

/// Coordinator → iOS dispatcher: one request to make at Apple.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChannelCommand {
    pub v: WireVersion,
    /// The command's row in `live_activity_commands`; the report names it,
    /// so a redelivered command's outcome is recorded once.
    pub id: Uuid,
    pub activity_id: Uuid,
    pub app: String,
    pub environment: ApnsEnvironment,
    pub action: ChannelAction,
}

/// What to do at Apple.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChannelAction {
    /// `POST /1/apps/{bundle}/channels` on the environment's channels host.
    CreateChannel { storage_policy: StoragePolicy },
    /// `POST /4/broadcasts/apps/{bundle}` on the environment's push host,
    /// `apns-channel-id: channel_id`, `apns-push-type: liveactivity`.
    Broadcast {
        channel_id: String,
        update_id: Uuid,
        /// The APNs JSON body, built and size-checked by the coordinator.
        payload: Value,
        /// `apns-priority`: 10 (immediate) or 5 (budgeted by the system).
        priority: u8,
    },
    /// `DELETE /1/apps/{bundle}/channels` with `apns-channel-id`.
    DeleteChannel { channel_id: String },
}

/// iOS dispatcher → coordinator: Apple's answer to one command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelReport {
    pub v: WireVersion,
    pub command_id: Uuid,
    pub activity_id: Uuid,
    pub outcome: ChannelOutcome,
}

/// How a command ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ChannelOutcome {
    /// The channel exists; Apple's `apns-channel-id`.
    Created { channel_id: String },
    /// The broadcast was accepted.
    Sent,
    /// The channel is gone (deleted now, or Apple no longer knew it).
    Deleted,
    /// Apple refused with a final answer (`BadChannelId`, `PayloadTooLarge`, …).
    Refused { status: u16, reason: String },
    /// No answer within the deadline and retry cap.
    Failed { error: String },
}

/// Why a start or an update's body was refused; each message names its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LiveActivityError {
    #[error("content_state must be a JSON object")]
    ContentStateNotObject,
    #[error("attributes must be a JSON object")]
    AttributesNotObject,
    #[error("dismissal_date must not be before stale_date")]
    DatesOutOfOrder,
    #[error(
        "content_state: the APNs payload would be {0} bytes; Apple accepts at most {APNS_MAX_PAYLOAD_BYTES}"
    )]
    PayloadTooLarge(usize),
}

impl LiveActivityError {
    /// The request field the refusal names (for the 422's problem body).
    pub fn field(&self) -> &'static str {
        match self {
            LiveActivityError::ContentStateNotObject | LiveActivityError::PayloadTooLarge(_) => {
                "content_state"
            }
            LiveActivityError::AttributesNotObject => "attributes",
            LiveActivityError::DatesOutOfOrder => "dismissal_date",
        }
    }
}

/// An alert shown with a start or an update.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityAlert {
    pub title: String,
    pub body: String,
}

/// A Live Activity's start push, carried by its notification
/// ([`crate::Notification::live_activity`]): set by the coordinator when the
/// last of the activity's channels has its id, never read from the API.
///
/// - The harvest reads only iOS `push_to_start` tokens whose
///   `attributes_type` equals this one (alerts read `device` tokens only).
/// - The iOS dispatcher sends each token `apns-push-type: liveactivity` on
///   topic `<bundle>.push-type.liveactivity` with the [`StartBody`] of the
///   batch's environment (its channel id in `input-push-channel`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LiveActivityStart {
    pub activity_id: Uuid,
    pub attributes_type: String,
    pub attributes: Value,
    pub content_state: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<ActivityAlert>,
    pub timestamp: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_date: Option<i64>,
    /// Apple's channel id in production, when the activity has one there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub production_channel: Option<String>,
    /// Apple's channel id in the sandbox, when the activity has one there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_channel: Option<String>,
}

impl LiveActivityStart {
    /// The channel of one APNs environment; a batch of an environment
    /// without one is not sent (the coordinator creates a channel for each
    /// environment among the activity's tokens before the start).
    pub fn channel(&self, environment: ApnsEnvironment) -> Option<&str> {
        match environment {
            ApnsEnvironment::Production => self.production_channel.as_deref(),
            ApnsEnvironment::Sandbox => self.sandbox_channel.as_deref(),
        }
    }

    /// The start push's body for one environment's channel.
    pub fn body<'a>(&'a self, channel_id: &'a str) -> StartBody<'a> {
        StartBody {
            attributes_type: &self.attributes_type,
            attributes: &self.attributes,
            content_state: &self.content_state,
            alert: self.alert.as_ref(),
            timestamp: self.timestamp,
            stale_date: self.stale_date,
            channel_id,
        }
    }
}

/// The `aps` body of a start push (sent to push-to-start tokens through
/// the normal pipeline, one body per APNs environment for its channel id).
pub struct StartBody<'a> {
    pub attributes_type: &'a str,
    pub attributes: &'a Value,
    pub content_state: &'a Value,
    pub alert: Option<&'a ActivityAlert>,
    pub timestamp: i64,
    pub stale_date: Option<i64>,
    pub channel_id: &'a str,
}

impl StartBody<'_> {
    /// The APNs JSON, refused when a field has the wrong shape or the body
    /// is over Apple's 4096 bytes.
    pub fn to_json(&self) -> Result<Value, LiveActivityError> {
        if !self.attributes.is_object() {
            return Err(LiveActivityError::AttributesNotObject);
        }
        let mut aps = base_aps("start", self.content_state, self.timestamp, self.alert)?;
        aps.insert("attributes-type".into(), json!(self.attributes_type));
        aps.insert("attributes".into(), self.attributes.clone());
        aps.insert("input-push-channel".into(), json!(self.channel_id));
        if let Some(stale) = self.stale_date {
            aps.insert("stale-date".into(), json!(stale));
        }
        sized(json!({ "aps": aps }))
    }

    /// The body as the dispatcher pushes it: [`Self::to_json`] with the
    /// start's notification id beside `aps` (as every Clarion push
    /// carries, [`crate::payload::NOTIFICATION_ID_KEY`]), refused when that
    /// makes it larger than Apple's 4096 bytes. The size to validate a
    /// start against.
    pub fn to_push_json(&self, notification_id: Uuid) -> Result<Value, LiveActivityError> {
        let mut body = self.to_json()?;
        if let Value::Object(fields) = &mut body {
            fields.insert(
                crate::payload::NOTIFICATION_ID_KEY.into(),
                json!(notification_id.to_string()),
            );
        }
        sized(body)
    }
}

/// The `aps` body of an update or an end, broadcast once per channel.
pub struct UpdateBody<'a> {
    pub end: bool,
    pub content_state: &'a Value,
    pub alert: Option<&'a ActivityAlert>,
    pub timestamp: i64,
    pub stale_date: Option<i64>,
    pub dismissal_date: Option<i64>,
    pub relevance_score: Option<f64>,
}

impl UpdateBody<'_> {
    /// The APNs JSON, refused when a field has the wrong shape, the dates
    /// are out of order or the body is over Apple's 4096 bytes.
    pub fn to_json(&self) -> Result<Value, LiveActivityError> {
        if let (Some(stale), Some(dismissal)) = (self.stale_date, self.dismissal_date)
            && dismissal < stale
        {
            return Err(LiveActivityError::DatesOutOfOrder);
        }
        let event = if self.end { "end" } else { "update" };
        let mut aps = base_aps(event, self.content_state, self.timestamp, self.alert)?;
        if let Some(stale) = self.stale_date {
            aps.insert("stale-date".into(), json!(stale));
        }
        if let Some(dismissal) = self.dismissal_date {
            aps.insert("dismissal-date".into(), json!(dismissal));
        }
        if let Some(score) = self.relevance_score {
            aps.insert("relevance-score".into(), json!(score));
        }
        sized(json!({ "aps": aps }))
    }
}

fn base_aps(
    event: &str,
    content_state: &Value,
    timestamp: i64,
    alert: Option<&ActivityAlert>,
) -> Result<Map<String, Value>, LiveActivityError> {
    if !content_state.is_object() {
        return Err(LiveActivityError::ContentStateNotObject);
    }
    let mut aps = Map::new();
    aps.insert("event".into(), json!(event));
    aps.insert("timestamp".into(), json!(timestamp));
    aps.insert("content-state".into(), content_state.clone());
    if let Some(alert) = alert {
        aps.insert(
            "alert".into(),
            json!({ "title": alert.title, "body": alert.body }),
        );
    }
    Ok(aps)
}

fn sized(body: Value) -> Result<Value, LiveActivityError> {
    let bytes = body.to_string().len();
    if bytes > APNS_MAX_PAYLOAD_BYTES {
        return Err(LiveActivityError::PayloadTooLarge(bytes));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_body_carries_what_apple_documents() {
        let state = json!({"home": 1, "away": 0});
        let attributes = json!({"match": "ENG v FRA"});
        let body = StartBody {
            attributes_type: "MatchAttributes",
            attributes: &attributes,
            content_state: &state,
            alert: Some(&ActivityAlert {
                title: "Kick-off".into(),
                body: "ENG v FRA".into(),
            }),
            timestamp: 1_700_000_000,
            stale_date: None,
            channel_id: "dHN0LXU=",
        }
        .to_json()
        .expect("valid start");
        let aps = &body["aps"];
        assert_eq!(aps["event"], "start");
        assert_eq!(aps["attributes-type"], "MatchAttributes");
        assert_eq!(aps["input-push-channel"], "dHN0LXU=");
        assert_eq!(aps["content-state"]["home"], 1);
        assert_eq!(aps["timestamp"], 1_700_000_000);
    }

    #[test]
    fn the_pushed_start_carries_its_notification_id_within_apples_limit() {
        let state = json!({"home": 0});
        let attributes = json!({});
        let body = |content_state: &Value, id| {
            StartBody {
                attributes_type: "MatchAttributes",
                attributes: &attributes,
                content_state,
                alert: None,
                timestamp: 1,
                stale_date: None,
                channel_id: "dHN0LXU=",
            }
            .to_push_json(id)
        };
        let id = Uuid::from_u128(42);
        let pushed = body(&state, id).expect("a small start");
        assert_eq!(pushed["notification_id"], id.to_string());
        assert_eq!(pushed["aps"]["event"], "start");
        // Just under the limit without the id, over it with the id.
        let bare = body(&json!({"text": ""}), id).expect("small").to_string().len();
        let filler = "x".repeat(APNS_MAX_PAYLOAD_BYTES - bare + 1);
        let big = json!({ "text": filler });
        let without_id = StartBody {
            attributes_type: "MatchAttributes",
            attributes: &attributes,
            content_state: &big,
            alert: None,
            timestamp: 1,
            stale_date: None,
            channel_id: "dHN0LXU=",
        };
        assert!(without_id.to_json().is_ok());
        assert!(matches!(
            without_id.to_push_json(id),
            Err(LiveActivityError::PayloadTooLarge(_))
        ));
    }

    #[test]
    fn refusals_name_their_field() {
        let not_object = json!([1, 2]);
        let update = |content_state: &Value, stale, dismissal| {
            UpdateBody {
                end: false,
                content_state,
                alert: None,
                timestamp: 1,
                stale_date: stale,
                dismissal_date: dismissal,
                relevance_score: None,
            }
            .to_json()
        };
        let err = update(&not_object, None, None).expect_err("array state");
        assert_eq!(err.field(), "content_state");
        let err = update(&json!({}), Some(10), Some(5)).expect_err("dates out of order");
        assert_eq!(err.field(), "dismissal_date");
        let big = json!({ "text": "x".repeat(APNS_MAX_PAYLOAD_BYTES) });
        let err = update(&big, None, None).expect_err("too large");
        assert!(matches!(err, LiveActivityError::PayloadTooLarge(_)));
        assert_eq!(err.field(), "content_state");
        assert!(update(&json!({"home": 2}), Some(5), Some(10)).is_ok());
    }

    #[test]
    fn commands_and_reports_round_trip() {
        let command = ChannelCommand {
            v: WireVersion::default(),
            id: Uuid::nil(),
            activity_id: Uuid::nil(),
            app: "default".into(),
            environment: ApnsEnvironment::Sandbox,
            action: ChannelAction::CreateChannel {
                storage_policy: StoragePolicy::MostRecent,
            },
        };
        let text = serde_json::to_string(&command).expect("serialises");
        assert!(text.contains(r#""kind":"create_channel""#), "{text}");
        assert!(text.contains(r#""storage_policy":"most-recent""#), "{text}");
        assert_eq!(
            serde_json::from_str::<ChannelCommand>(&text).expect("reads back"),
            command
        );
        let report = ChannelReport {
            v: WireVersion::default(),
            command_id: Uuid::nil(),
            activity_id: Uuid::nil(),
            outcome: ChannelOutcome::Refused {
                status: 400,
                reason: "BadChannelId".into(),
            },
        };
        let text = serde_json::to_string(&report).expect("serialises");
        assert_eq!(
            serde_json::from_str::<ChannelReport>(&text).expect("reads back"),
            report
        );
    }
}
