//! A web push as prepared once per batch: the plaintext (the notification's
//! web payload), the headers every push of the batch shares (`TTL`,
//! `Urgency`, `Topic`), and each token's subscription.

use std::collections::HashMap;

use clarion_proto::web_push::base64url;
use clarion_proto::{Notification, Priority, TokenBatch, WebSubscription};
use http::HeaderValue;
use sha2::{Digest, Sha256};

use super::channel_error::WebPushError;

/// Longest `Topic` (RFC 8030 §5.4): 32 base64url characters.
const MAX_TOPIC_CHARS: usize = 32;

pub struct PreparedWeb {
    pub plaintext: Vec<u8>,
    pub ttl: HeaderValue,
    pub urgency: HeaderValue,
    pub topic: Option<HeaderValue>,
    pub subscriptions: HashMap<String, WebSubscription>,
}

pub fn prepare(batch: &TokenBatch) -> Result<PreparedWeb, WebPushError> {
    if batch.subscriptions.len() != batch.tokens.len() {
        return Err(WebPushError::Misaligned {
            tokens: batch.tokens.len(),
            subscriptions: batch.subscriptions.len(),
        });
    }
    let message = batch.message();
    let notification = &message.notification;
    Ok(PreparedWeb {
        plaintext: notification.web_payload(message.notification_id),
        ttl: HeaderValue::from(notification.ttl_seconds),
        urgency: HeaderValue::from_static(urgency(notification)),
        topic: notification
            .collapse_key
            .as_deref()
            .and_then(|key| HeaderValue::from_str(&topic(key)).ok()),
        subscriptions: batch
            .tokens
            .iter()
            .cloned()
            .zip(batch.subscriptions.iter().cloned())
            .collect(),
    })
}

/// The `Urgency` header (RFC 8030 §5.3): `low` for the bulk lane
/// (briefings, marketing: a browser on battery may hold it back), else the
/// notification's priority, `high` or `normal`.
pub fn urgency(notification: &Notification) -> &'static str {
    match (notification.bulk, notification.priority) {
        (true, _) => "low",
        (false, Priority::High) => "high",
        (false, Priority::Normal) => "normal",
    }
}

/// The `Topic` header for a collapse key: the key itself when it is at
/// most 32 base64url characters, else a hash of it that is.
pub fn topic(collapse_key: &str) -> String {
    let fits = collapse_key.len() <= MAX_TOPIC_CHARS
        && collapse_key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if fits {
        return collapse_key.to_owned();
    }
    // 24 bytes of SHA-256 are exactly 32 base64url characters.
    base64url(&Sha256::digest(collapse_key.as_bytes())[..24])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urgency_follows_the_priority_and_the_bulk_lane_is_low() {
        let alert = |priority, bulk| Notification {
            priority,
            bulk,
            ..Notification::alert(vec!["news".into()], "It happened")
        };
        assert_eq!(urgency(&alert(Priority::High, false)), "high");
        assert_eq!(urgency(&alert(Priority::Normal, false)), "normal");
        assert_eq!(urgency(&alert(Priority::High, true)), "low");
        assert_eq!(urgency(&alert(Priority::Normal, true)), "low");
    }

    #[test]
    fn a_topic_fits_32_base64url_characters() {
        assert_eq!(topic("breaking"), "breaking");
        let hashed = topic("breaking news: the election");
        assert_eq!(hashed.len(), 32);
        assert!(
            hashed
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
        assert_eq!(hashed, topic("breaking news: the election"));
        assert_eq!(topic(&"a".repeat(33)).len(), 32);
    }
}
