//! A Live Activity's start push (issue 38): sent like an alert, one per
//! push-to-start token, but as `apns-push-type: liveactivity` on
//! `<bundle>.push-type.liveactivity`, priority 10, its body the
//! [`LiveActivityStart`]'s `aps` for the batch's environment (that
//! environment's broadcast channel in `input-push-channel`) with
//! `notification_id` beside it, as every Clarion push carries.

use bytes::Bytes;
use clarion_proto::live_activity::{LiveActivityError, LiveActivityStart};
use clarion_proto::{ApnsEnvironment, TokenBatch};
use http::{HeaderMap, HeaderValue};

use super::payload::PreparedApns;

/// Why a start push cannot be built for a batch.
#[derive(Debug, thiserror::Error)]
pub enum StartPushError {
    /// The activity has no channel in the batch's environment: the batch
    /// is not sent (the coordinator creates one per environment first).
    #[error(
        "the Live Activity {activity} has no {environment} channel; its start push to this batch is not sent"
    )]
    NoChannel {
        activity: uuid::Uuid,
        environment: ApnsEnvironment,
    },
    #[error("the Live Activity's start body is refused: {0}")]
    Body(#[from] LiveActivityError),
    #[error("cannot encode the start push: {0}")]
    Encode(#[from] serde_json::Error),
}

/// The `apns-topic` of a Live Activity push for `bundle`.
pub fn topic(bundle: &str) -> String {
    format!("{bundle}.push-type.liveactivity")
}

/// The start push of `start` to `batch`'s tokens, on `topic` (see [`topic`]).
pub fn prepare_start(
    batch: &TokenBatch,
    start: &LiveActivityStart,
    topic: &HeaderValue,
) -> Result<PreparedApns, StartPushError> {
    let channel = start
        .channel(batch.environment)
        .ok_or(StartPushError::NoChannel {
            activity: start.activity_id,
            environment: batch.environment,
        })?;
    let body = start.body(channel).to_push_json(batch.batch_id.notification_id)?;
    let mut headers = HeaderMap::new();
    headers.insert("apns-topic", topic.clone());
    headers.insert("apns-push-type", HeaderValue::from_static("liveactivity"));
    headers.insert("apns-priority", HeaderValue::from_static("10"));
    let ttl = u64::from(batch.notification.ttl_seconds);
    headers.insert(
        "apns-expiration",
        HeaderValue::from(batch.sent_at.timestamp().max(0) as u64 + ttl),
    );
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    Ok(PreparedApns {
        body: Bytes::from(serde_json::to_vec(&body)?),
        headers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_proto::{BatchId, Notification, Platform, WireVersion};
    use serde_json::{Value, json};
    use uuid::Uuid;

    fn start() -> LiveActivityStart {
        LiveActivityStart {
            activity_id: Uuid::from_u128(9),
            attributes_type: "MatchAttributes".into(),
            attributes: json!({"match": "ENG v FRA"}),
            content_state: json!({"home": 0, "away": 0}),
            alert: None,
            timestamp: 1_800_000_000,
            stale_date: None,
            production_channel: Some("cHJvZA==".into()),
            sandbox_channel: None,
        }
    }

    fn batch(environment: ApnsEnvironment) -> TokenBatch {
        let mut notification = Notification::alert(vec!["sport/football".into()], "");
        notification.live_activity = Some(start());
        TokenBatch {
            v: WireVersion::CURRENT,
            batch_id: BatchId {
                notification_id: Uuid::from_u128(42),
                job_index: 0,
                seq: 0,
            },
            platform: Platform::Ios,
            environment,
            sent_at: chrono::Utc::now(),
            notification,
            locale: None,
            tokens: vec!["ab".repeat(32)],
            subscriptions: Vec::new(),
        }
    }

    #[test]
    fn a_start_push_is_a_liveactivity_push_with_the_environments_channel() {
        let topic = HeaderValue::from_str(&super::topic("com.clarion.news")).unwrap();
        let prepared = prepare_start(&batch(ApnsEnvironment::Production), &start(), &topic).unwrap();
        assert_eq!(
            prepared.headers["apns-topic"],
            "com.clarion.news.push-type.liveactivity"
        );
        assert_eq!(prepared.headers["apns-push-type"], "liveactivity");
        assert_eq!(prepared.headers["apns-priority"], "10");
        let body: Value = serde_json::from_slice(&prepared.body).unwrap();
        assert_eq!(body["aps"]["event"], "start");
        assert_eq!(body["aps"]["input-push-channel"], "cHJvZA==");
        assert_eq!(body["aps"]["attributes-type"], "MatchAttributes");
        assert_eq!(body["notification_id"], Uuid::from_u128(42).to_string());
        let refused = prepare_start(&batch(ApnsEnvironment::Sandbox), &start(), &topic);
        assert!(
            matches!(refused, Err(StartPushError::NoChannel { .. })),
            "a batch of an environment without a channel is not sent"
        );
    }
}
