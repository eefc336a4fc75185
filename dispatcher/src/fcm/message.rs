//! The FCM v1 message of a notification, serialised once per notification
//! around the device token: `notification` (title, body, image), `android`
//! (priority, ttl, collapse key, and `notification` with sound, click
//! action, channel, count and priority) and `data` (string values only,
//! `notification_id` always among them). A background push is a data-only
//! message at normal priority.

use bytes::{BufMut, Bytes, BytesMut};
use chrono::{DateTime, Utc};
use clarion_proto::{Priority, PushMessage, PushType};
use serde_json::{Map, Value, json};

/// The message with a hole for the token: `prefix + token + suffix`.
pub struct PreparedFcm {
    prefix: Bytes,
    suffix: Bytes,
}

impl PreparedFcm {
    /// The request body for one device.
    pub fn body(&self, token: &str) -> Bytes {
        let needs_escape = token.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20);
        let escaped;
        let token = if needs_escape {
            escaped = serde_json::to_string(token).unwrap_or_default();
            &escaped[1..escaped.len().saturating_sub(1)]
        } else {
            token
        };
        let mut body = BytesMut::with_capacity(self.prefix.len() + token.len() + self.suffix.len());
        body.put_slice(&self.prefix);
        body.put_slice(token.as_bytes());
        body.put_slice(&self.suffix);
        body.freeze()
    }
}

pub fn prepare(
    push: &PushMessage<'_>,
    sent_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<PreparedFcm, serde_json::Error> {
    let notification = &*push.notification;
    let mut message = Map::new();
    let alert = notification.push_type.is_alert();
    if alert {
        message.insert(
            "notification".into(),
            Value::Object(notification.fcm_notification()),
        );
    }

    let mut android = Map::new();
    let priority = match (notification.push_type, notification.priority) {
        (PushType::Alert, Priority::High) => "high",
        (PushType::Alert, Priority::Normal) | (PushType::Background, _) => "normal",
    };
    android.insert("priority".into(), json!(priority));
    let expires = sent_at + chrono::Duration::seconds(i64::from(notification.ttl_seconds));
    let left = (expires - now).num_seconds().max(0);
    android.insert("ttl".into(), json!(format!("{left}s")));
    if let Some(key) = &notification.collapse_key {
        android.insert("collapse_key".into(), json!(key));
    }
    let shown_on_android = notification.fcm_android_notification();
    if alert && !shown_on_android.is_empty() {
        android.insert("notification".into(), Value::Object(shown_on_android));
    }
    message.insert("android".into(), Value::Object(android));
    // Never empty: it carries the notification's id.
    message.insert("data".into(), Value::Object(push.custom_keys()));

    let rest = serde_json::to_string(&Value::Object(message))?;
    // `rest` is `{...}` and never empty: it always holds `notification`.
    Ok(PreparedFcm {
        prefix: Bytes::from_static(br#"{"message":{"token":""#),
        suffix: Bytes::from(format!("\",{}}}", &rest[1..])),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_proto::Notification;
    use std::collections::BTreeMap;
    use uuid::Uuid;

    const ID: Uuid = Uuid::from_u128(0x6f1c_2b3a_0000_4000_8000_0000_0000_0042);

    fn prepare(
        n: &Notification,
        sent_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<PreparedFcm, serde_json::Error> {
        super::prepare(&PushMessage::new(ID, n), sent_at, now)
    }

    fn notification() -> Notification {
        Notification {
            topics: vec!["t".into()],
            title: Some("Breaking".into()),
            body: "Something \"quoted\" happened".into(),
            link: Some("https://news.example/1".into()),
            image_url: None,
            priority: Priority::High,
            ttl_seconds: 3600,
            collapse_key: Some("breaking".into()),
            data: BTreeMap::from([("section".into(), "world".into())]),
            ..Notification::alert(Vec::new(), "")
        }
    }

    #[test]
    fn the_body_is_a_v1_message_around_the_token() {
        let sent = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let prepared = prepare(&notification(), sent, sent + chrono::Duration::seconds(10)).unwrap();
        let body: Value = serde_json::from_slice(&prepared.body("abc:DEF-1_2")).unwrap();
        let message = &body["message"];
        assert_eq!(message["token"], "abc:DEF-1_2");
        assert_eq!(message["notification"]["body"], "Something \"quoted\" happened");
        assert_eq!(message["android"]["priority"], "high");
        assert_eq!(message["android"]["ttl"], "3590s");
        assert_eq!(message["android"]["collapse_key"], "breaking");
        assert_eq!(message["data"]["link"], "https://news.example/1");
        assert_eq!(message["data"]["section"], "world");
        assert_eq!(
            message["data"]["notification_id"],
            "6f1c2b3a-0000-4000-8000-000000000042"
        );
    }

    /// What FCM counts against its 4000 bytes, as sent.
    fn counted_bytes(message: &Value) -> usize {
        let mut counted = Map::new();
        if let Some(shown) = message.get("notification") {
            counted.insert("notification".into(), shown.clone());
        }
        let android = message["android"].get("notification").cloned();
        if message.get("notification").is_some() {
            counted.insert(
                "android_notification".into(),
                android.unwrap_or_else(|| json!({})),
            );
        }
        counted.insert("data".into(), message["data"].clone());
        serde_json::to_vec(&Value::Object(counted)).unwrap().len()
    }

    #[test]
    fn the_message_is_the_size_the_api_validated_whatever_the_id() {
        let sent = Utc::now();
        let mut bare = notification();
        bare.data.clear();
        bare.link = None;
        let background = Notification {
            push_type: PushType::Background,
            title: None,
            body: String::new(),
            ..notification()
        };
        for n in [notification(), bare, background] {
            for id in [Uuid::nil(), Uuid::max(), Uuid::new_v4()] {
                let prepared = super::prepare(&PushMessage::new(id, &n), sent, sent).unwrap();
                let body: Value = serde_json::from_slice(&prepared.body("t")).unwrap();
                let message = &body["message"];
                assert_eq!(message["data"]["notification_id"], id.to_string());
                assert_eq!(counted_bytes(message), n.fcm_payload_bytes(), "{n:?}");
            }
        }
    }

    #[test]
    fn a_data_key_cannot_spoof_the_id() {
        let mut n = notification();
        n.data.insert("notification_id".into(), "spoofed".into());
        let sent = Utc::now();
        let body: Value = serde_json::from_slice(&prepare(&n, sent, sent).unwrap().body("t")).unwrap();
        assert_eq!(body["message"]["data"]["notification_id"], ID.to_string());
    }

    #[test]
    fn alert_options_reach_android_notification() {
        let n = Notification {
            badge: Some(2),
            sound: Some(Some("chime".into())),
            category: Some("OPEN_STORY".into()),
            android_channel_id: Some("breaking".into()),
            interruption_level: Some(clarion_proto::InterruptionLevel::Passive),
            ..notification()
        };
        let sent = Utc::now();
        let body: Value = serde_json::from_slice(&prepare(&n, sent, sent).unwrap().body("t")).unwrap();
        let shown = &body["message"]["android"]["notification"];
        assert_eq!(shown["sound"], "chime");
        assert_eq!(shown["click_action"], "OPEN_STORY");
        assert_eq!(shown["channel_id"], "breaking");
        assert_eq!(shown["notification_count"], 2);
        assert_eq!(shown["notification_priority"], "PRIORITY_LOW");
    }

    #[test]
    fn a_background_push_is_data_only_at_normal_priority() {
        let n = Notification {
            push_type: PushType::Background,
            title: None,
            body: String::new(),
            ..notification()
        };
        let sent = Utc::now();
        let body: Value = serde_json::from_slice(&prepare(&n, sent, sent).unwrap().body("t")).unwrap();
        let message = &body["message"];
        assert!(message.get("notification").is_none(), "{message}");
        assert!(message["android"].get("notification").is_none(), "{message}");
        assert_eq!(message["android"]["priority"], "normal");
        assert_eq!(message["data"]["section"], "world");
    }

    #[test]
    fn odd_tokens_are_escaped() {
        let sent = Utc::now();
        let prepared = prepare(&notification(), sent, sent).unwrap();
        let body: Value = serde_json::from_slice(&prepared.body("a\"b")).unwrap();
        assert_eq!(body["message"]["token"], "a\"b");
    }
}
