//! The FCM v1 message of a notification, serialised once per notification
//! around the device token: `notification` (title, body, image), `android`
//! (priority, ttl, collapse key) and `data` (string values only).

use bytes::{BufMut, Bytes, BytesMut};
use chrono::{DateTime, Utc};
use clarion_proto::{Notification, Priority};
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
    notification: &Notification,
    sent_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<PreparedFcm, String> {
    let mut message = Map::new();
    let mut shown = Map::new();
    if let Some(title) = &notification.title {
        shown.insert("title".into(), json!(title));
    }
    shown.insert("body".into(), json!(notification.body));
    if let Some(image) = &notification.image_url {
        shown.insert("image".into(), json!(image));
    }
    message.insert("notification".into(), Value::Object(shown));

    let mut android = Map::new();
    let priority = match notification.priority {
        Priority::High => "high",
        Priority::Normal => "normal",
    };
    android.insert("priority".into(), json!(priority));
    // FCM counts the TTL from when it receives the message: send what is left.
    let expires = sent_at + chrono::Duration::seconds(i64::from(notification.ttl_seconds));
    let left = (expires - now).num_seconds().max(0);
    android.insert("ttl".into(), json!(format!("{left}s")));
    if let Some(key) = &notification.collapse_key {
        android.insert("collapse_key".into(), json!(key));
    }
    message.insert("android".into(), Value::Object(android));
    let data = notification.custom_keys();
    if !data.is_empty() {
        message.insert("data".into(), Value::Object(data));
    }

    let rest = serde_json::to_string(&Value::Object(message)).map_err(|err| err.to_string())?;
    // `rest` is `{...}` and never empty: it always holds `notification`.
    Ok(PreparedFcm {
        prefix: Bytes::from_static(br#"{"message":{"token":""#),
        suffix: Bytes::from(format!("\",{}}}", &rest[1..])),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

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
            dry_run: false,
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
    }

    #[test]
    fn odd_tokens_are_escaped() {
        let sent = Utc::now();
        let prepared = prepare(&notification(), sent, sent).unwrap();
        let body: Value = serde_json::from_slice(&prepared.body("a\"b")).unwrap();
        assert_eq!(body["message"]["token"], "a\"b");
    }
}
