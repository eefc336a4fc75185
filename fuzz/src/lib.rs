//! What every fuzz target checks once a message decoded: encoding it again
//! and decoding that gives the same value (a consumer that re-publishes or
//! dead-letters a message must not change it), and the payload it carries
//! passes through validation and size estimates without panicking.

use clarion_proto::codec::{decode, encode};
use clarion_proto::{Notification, WireMessage};
use serde::de::DeserializeOwned;

/// Decodes `data` as `T` the way the services do; when it decodes, checks
/// the round trip and returns the message.
pub fn decode_and_round_trip<T>(data: &[u8]) -> Option<T>
where
    T: WireMessage + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let message = decode::<T>(data).ok()?;
    let bytes = encode(&message).expect("a decoded message encodes");
    let again = decode::<T>(&bytes).expect("an encoded message decodes");
    assert_eq!(again, message, "the round trip changed the message");
    let _ = message.notification_id();
    let _ = message.routing_key();
    Some(message)
}

/// What the coordinator does with a notification (validation) and what the
/// dispatchers do with one in a batch (payload sizes, custom keys).
pub fn exercise_notification(notification: &Notification) {
    let _ = notification.apns_payload_bytes();
    let _ = notification.fcm_payload_bytes();
    let _ = notification.custom_keys(Default::default());
    if let Ok(valid) = notification.clone().validated() {
        assert!(!valid.topics.is_empty());
        assert!(valid.apns_payload_bytes() <= clarion_proto::payload::APNS_MAX_PAYLOAD_BYTES);
        assert!(valid.fcm_payload_bytes() <= clarion_proto::payload::FCM_MAX_PAYLOAD_BYTES);
        // Valid is a fixed point: validating again changes nothing.
        assert_eq!(valid.clone().validated().as_ref(), Ok(&valid));
    }
}
