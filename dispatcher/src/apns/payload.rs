//! The APNs push of a notification, built with `a2`'s payload model once per
//! notification: `aps.alert` title and body, default sound,
//! `mutable-content` when an image comes along, `thread-id` from the
//! collapse key, then the custom keys (`data`, `link`, `image_url`).

use a2::request::notification::{DefaultNotificationBuilder, NotificationBuilder, NotificationOptions};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use clarion_proto::{Notification, Priority};
use http::{HeaderMap, HeaderValue};
use serde_json::Value;

/// A notification ready to push to any iOS device.
pub struct PreparedApns {
    pub body: Bytes,
    /// `apns-topic`, `apns-push-type`, `apns-priority`, `apns-expiration`,
    /// `apns-collapse-id`.
    pub headers: HeaderMap,
}

pub fn prepare(
    notification: &Notification,
    sent_at: DateTime<Utc>,
    topic: &HeaderValue,
) -> Result<PreparedApns, String> {
    let body = body(notification).map_err(|err| format!("cannot build the APNs payload: {err}"))?;
    let mut headers = HeaderMap::new();
    headers.insert("apns-topic", topic.clone());
    headers.insert("apns-push-type", HeaderValue::from_static("alert"));
    let priority = match notification.priority {
        Priority::High => "10",
        Priority::Normal => "5",
    };
    headers.insert("apns-priority", HeaderValue::from_static(priority));
    let expires = sent_at.timestamp().max(0) as u64 + u64::from(notification.ttl_seconds);
    headers.insert("apns-expiration", HeaderValue::from(expires));
    if let Some(key) = &notification.collapse_key {
        let value = HeaderValue::from_str(key)
            .map_err(|_| "the collapse key is not a valid header value".to_owned())?;
        headers.insert("apns-collapse-id", value);
    }
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    Ok(PreparedApns {
        body: Bytes::from(body),
        headers,
    })
}

/// The JSON body (what `Notification::apns_payload_bytes` sizes).
pub fn body(notification: &Notification) -> Result<Vec<u8>, serde_json::Error> {
    let mut builder = DefaultNotificationBuilder::new()
        .set_body(&notification.body)
        .set_sound("default");
    if let Some(title) = &notification.title {
        builder = builder.set_title(title);
    }
    if notification.image_url.is_some() {
        builder = builder.set_mutable_content();
    }
    let custom = notification.custom_keys();
    let mut payload = builder.build("", NotificationOptions::default());
    for (key, value) in &custom {
        payload
            .add_custom_data(key, value)
            .map_err(|err| serde::ser::Error::custom(err.to_string()))?;
    }
    let mut json = serde_json::to_value(&payload)?;
    // a2's model has no `thread-id`; Apple groups alerts by it.
    if let (Some(key), Some(aps)) = (
        &notification.collapse_key,
        json.get_mut("aps").and_then(Value::as_object_mut),
    ) {
        aps.insert("thread-id".into(), Value::String(key.clone()));
    }
    serde_json::to_vec(&json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn notification() -> Notification {
        Notification {
            topics: vec!["breaking/uk".into()],
            title: Some("Breaking".into()),
            body: "Something happened".into(),
            link: Some("https://news.example/1".into()),
            image_url: Some("https://news.example/1.jpg".into()),
            priority: Priority::Normal,
            ttl_seconds: 600,
            collapse_key: Some("breaking".into()),
            data: BTreeMap::from([("section".into(), "world".into())]),
            dry_run: false,
        }
    }

    #[test]
    fn the_body_holds_the_alert_and_the_custom_keys() {
        let body: Value = serde_json::from_slice(&body(&notification()).unwrap()).unwrap();
        assert_eq!(body["aps"]["alert"]["title"], "Breaking");
        assert_eq!(body["aps"]["alert"]["body"], "Something happened");
        assert_eq!(body["aps"]["mutable-content"], 1);
        assert_eq!(body["aps"]["thread-id"], "breaking");
        assert_eq!(body["aps"]["sound"], "default");
        assert_eq!(body["link"], "https://news.example/1");
        assert_eq!(body["image_url"], "https://news.example/1.jpg");
        assert_eq!(body["section"], "world");
    }

    #[test]
    fn the_body_is_the_size_the_api_validated() {
        let mut plain = notification();
        plain.title = None;
        plain.image_url = None;
        plain.collapse_key = None;
        plain.data.clear();
        for n in [notification(), plain] {
            assert_eq!(body(&n).unwrap().len(), n.apns_payload_bytes());
        }
    }

    #[test]
    fn headers_carry_priority_expiry_and_collapse_id() {
        let sent_at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let prepared = prepare(
            &notification(),
            sent_at,
            &HeaderValue::from_static("com.clarion.news"),
        )
        .unwrap();
        assert_eq!(prepared.headers["apns-priority"], "5");
        assert_eq!(prepared.headers["apns-expiration"], "1800000600");
        assert_eq!(prepared.headers["apns-collapse-id"], "breaking");
        assert_eq!(prepared.headers["apns-topic"], "com.clarion.news");
    }
}
