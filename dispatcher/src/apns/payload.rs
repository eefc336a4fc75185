//! The APNs push of a notification, built with `a2`'s payload model once per
//! notification. An alert: `aps.alert` title and body, badge, sound (the
//! default one unless named or silenced), category, `mutable-content` when
//! an image comes along, `thread-id` from the collapse key,
//! `interruption-level` and `relevance-score`. A background push:
//! `content-available` only, at priority 5. Then the custom keys (`data`,
//! `link`, `image_url`, and `notification_id` beside `aps`).

use a2::request::notification::{DefaultNotificationBuilder, NotificationBuilder, NotificationOptions};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use clarion_proto::{Priority, PushMessage, PushType};
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
    message: &PushMessage<'_>,
    sent_at: DateTime<Utc>,
    topic: &HeaderValue,
) -> Result<PreparedApns, String> {
    let body = body(message).map_err(|err| format!("cannot build the APNs payload: {err}"))?;
    let notification = &*message.notification;
    let mut headers = HeaderMap::new();
    headers.insert("apns-topic", topic.clone());
    let (push_type, priority) = match (notification.push_type, notification.priority) {
        // Apple refuses priority 10 for background pushes.
        (PushType::Background, _) => ("background", "5"),
        (PushType::Alert, Priority::High) => ("alert", "10"),
        (PushType::Alert, Priority::Normal) => ("alert", "5"),
    };
    headers.insert("apns-push-type", HeaderValue::from_static(push_type));
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
pub fn body(message: &PushMessage<'_>) -> Result<Vec<u8>, serde_json::Error> {
    let notification = &*message.notification;
    let mut builder = DefaultNotificationBuilder::new();
    let alert = notification.push_type.is_alert();
    if alert {
        builder = builder.set_body(&notification.body);
        if let Some(title) = &notification.title {
            builder = builder.set_title(title);
        }
        if let Some(sound) = notification.sound_name() {
            builder = builder.set_sound(sound);
        }
        if let Some(badge) = notification.badge {
            builder = builder.set_badge(badge);
        }
        if let Some(category) = &notification.category {
            builder = builder.set_category(category);
        }
        if notification.image_url.is_some() {
            builder = builder.set_mutable_content();
        }
    } else {
        builder = builder.set_content_available();
    }
    let custom = message.custom_keys();
    let mut payload = builder.build("", NotificationOptions::default());
    for (key, value) in &custom {
        payload
            .add_custom_data(key, value)
            .map_err(|err| serde::ser::Error::custom(err.to_string()))?;
    }
    let mut json = serde_json::to_value(&payload)?;
    if let Some(aps) = json.get_mut("aps").and_then(Value::as_object_mut) {
        if alert {
            // Keys a2's model lacks.
            if let Some(key) = &notification.collapse_key {
                aps.insert("thread-id".into(), Value::String(key.clone()));
            }
            if let Some(level) = notification.interruption_level {
                aps.insert("interruption-level".into(), level.apns_name().into());
            }
            if let Some(score) = notification.relevance_score {
                aps.insert("relevance-score".into(), score.into());
            }
        } else {
            // a2 always writes it; a silent push shows nothing to mutate.
            aps.remove("mutable-content");
        }
    }
    serde_json::to_vec(&json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_proto::Notification;
    use std::collections::BTreeMap;
    use uuid::Uuid;

    const ID: Uuid = Uuid::from_u128(0x6f1c_2b3a_0000_4000_8000_0000_0000_0042);

    fn body(n: &Notification) -> Result<Vec<u8>, serde_json::Error> {
        super::body(&PushMessage::new(ID, n))
    }

    fn prepare(
        n: &Notification,
        sent_at: DateTime<Utc>,
        topic: &HeaderValue,
    ) -> Result<PreparedApns, String> {
        super::prepare(&PushMessage::new(ID, n), sent_at, topic)
    }

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
            ..Notification::alert(Vec::new(), "")
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
        assert_eq!(body["notification_id"], "6f1c2b3a-0000-4000-8000-000000000042");
    }

    fn background() -> Notification {
        Notification {
            push_type: PushType::Background,
            title: None,
            body: String::new(),
            image_url: None,
            ..notification()
        }
    }

    fn dressed() -> Notification {
        Notification {
            badge: Some(3),
            sound: Some(Some("chime.caf".into())),
            category: Some("NEWS_ACTIONS".into()),
            interruption_level: Some(clarion_proto::InterruptionLevel::TimeSensitive),
            relevance_score: Some(0.75),
            ..notification()
        }
    }

    #[test]
    fn the_body_is_the_size_the_api_validated() {
        let mut plain = notification();
        plain.title = None;
        plain.image_url = None;
        plain.collapse_key = None;
        plain.data.clear();
        let mut silent = dressed();
        silent.sound = Some(None);
        let mut bare_background = background();
        bare_background.data.clear();
        bare_background.link = None;
        for n in [
            notification(),
            plain,
            dressed(),
            silent,
            background(),
            bare_background,
        ] {
            assert_eq!(body(&n).unwrap().len(), n.apns_payload_bytes(), "{n:?}");
            // Whatever the id: every id is written in 36 characters.
            for id in [Uuid::nil(), Uuid::max(), Uuid::new_v4()] {
                let sized = super::body(&PushMessage::new(id, &n)).unwrap();
                assert_eq!(sized.len(), n.apns_payload_bytes(), "{n:?}");
            }
        }
    }

    #[test]
    fn the_id_is_the_notifications_even_when_data_names_the_key() {
        // Validation refuses the key; one stored before it was reserved
        // cannot spoof the id.
        let mut n = notification();
        n.data.insert("notification_id".into(), "spoofed".into());
        let sent: Value = serde_json::from_slice(&body(&n).unwrap()).unwrap();
        assert_eq!(sent["notification_id"], ID.to_string());
        assert_eq!(sent["section"], "world");
    }

    #[test]
    fn every_alert_option_reaches_aps() {
        let dressed_body: Value = serde_json::from_slice(&body(&dressed()).unwrap()).unwrap();
        let aps = &dressed_body["aps"];
        assert_eq!(aps["badge"], 3);
        assert_eq!(aps["sound"], "chime.caf");
        assert_eq!(aps["category"], "NEWS_ACTIONS");
        assert_eq!(aps["interruption-level"], "time-sensitive");
        assert_eq!(aps["relevance-score"], 0.75);
        let mut silent = dressed();
        silent.sound = Some(None);
        let silent_body: Value = serde_json::from_slice(&body(&silent).unwrap()).unwrap();
        assert!(silent_body["aps"].get("sound").is_none(), "{silent_body}");
    }

    #[test]
    fn a_background_push_is_content_available_at_priority_5() {
        let sent_at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let mut n = background();
        n.priority = Priority::High;
        let prepared = prepare(&n, sent_at, &HeaderValue::from_static("com.clarion.news")).unwrap();
        assert_eq!(prepared.headers["apns-push-type"], "background");
        assert_eq!(prepared.headers["apns-priority"], "5");
        let body: Value = serde_json::from_slice(&prepared.body).unwrap();
        assert_eq!(body["aps"], serde_json::json!({"content-available": 1}));
        assert_eq!(body["section"], "world");
        assert_eq!(body["notification_id"], ID.to_string());
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
