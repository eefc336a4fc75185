//! Apple's answers, read with `a2`'s error model, mapped to what the
//! dispatcher does next.
//!
//! A token is given up only on Apple's explicit, well-formed word about it:
//! 410 with the JSON reason `Unregistered` (gone), 400 `BadDeviceToken` or
//! `DeviceTokenNotForTopic` (invalid, held for the safety valve). Any other
//! answer — a 410 or 404 with no Apple body, an HTML page, another server's
//! JSON — keeps the token and fails the push with a reason: that is what a
//! wrong `CLARION_APNS_ENDPOINT` looks like, not a dead device.

use a2::ErrorReason;
use http::{HeaderMap, StatusCode};

use crate::channel::{Attempt, retry_after};

pub fn classify(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Attempt {
    if status == StatusCode::OK {
        return Attempt::Accepted;
    }
    // Apple always answers an error with a JSON `reason`; a reason `a2`
    // does not know yet is still Apple's answer.
    let apple = serde_json::from_slice::<AppleError>(body).ok();
    let reason = apple.as_ref().and_then(|apple| {
        serde_json::from_value::<ErrorReason>(serde_json::Value::String(apple.reason.clone())).ok()
    });
    match (status.as_u16(), reason) {
        (410, Some(ErrorReason::Unregistered)) => Attempt::Unregistered,
        (400, Some(ErrorReason::BadDeviceToken)) => Attempt::Invalid("BadDeviceToken"),
        (400, Some(ErrorReason::DeviceTokenNotForTopic)) => Attempt::Invalid("DeviceTokenNotForTopic"),
        (403, Some(ErrorReason::ExpiredProviderToken)) => Attempt::Reauthenticate("ExpiredProviderToken"),
        (403, Some(ErrorReason::InvalidProviderToken)) => Attempt::Failed("InvalidProviderToken"),
        (403, Some(ErrorReason::MissingProviderToken)) => Attempt::Failed("MissingProviderToken"),
        (403, _) => Attempt::Failed("Forbidden"),
        (413, _) => Attempt::Failed("PayloadTooLarge"),
        (429, Some(ErrorReason::TooManyProviderTokenUpdates)) => Attempt::Retry {
            reason: "TooManyProviderTokenUpdates",
            after: retry_after(headers),
            throttled: false,
        },
        // Apple's 429 `TooManyRequests` means "too many requests to this
        // device token": only that device waits, not every push.
        (429, _) => Attempt::Retry {
            reason: "TooManyRequests",
            after: retry_after(headers),
            throttled: false,
        },
        (500, _) => Attempt::Retry {
            reason: "InternalServerError",
            after: retry_after(headers),
            throttled: false,
        },
        (503, _) => Attempt::Retry {
            reason: "ServiceUnavailable",
            after: retry_after(headers),
            throttled: false,
        },
        (400, Some(ErrorReason::BadTopic | ErrorReason::TopicDisallowed | ErrorReason::MissingTopic)) => {
            Attempt::Failed("BadTopic")
        }
        // Not Apple's JSON: a wrong endpoint, a proxy, another service.
        // The token is kept.
        _ if apple.is_none() => Attempt::Failed(NOT_APNS),
        (400, _) => Attempt::Failed("BadRequest"),
        _ => Attempt::Failed("UnexpectedStatus"),
    }
}

/// The shape of every APNs error body.
#[derive(serde::Deserialize)]
struct AppleError {
    reason: String,
}

/// The failure reason of an answer that is not APNs': the endpoint is
/// probably not APNs (`CLARION_APNS_ENDPOINT`).
pub const NOT_APNS: &str = "NotApnsAnswer";

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn answer(status: u16, reason: &str) -> Attempt {
        let body = format!(r#"{{"reason":"{reason}"}}"#);
        classify(
            StatusCode::from_u16(status).unwrap(),
            &HeaderMap::new(),
            body.as_bytes(),
        )
    }

    #[test]
    fn apple_reasons_map_to_actions() {
        assert_eq!(
            classify(StatusCode::OK, &HeaderMap::new(), b""),
            Attempt::Accepted
        );
        assert_eq!(answer(410, "Unregistered"), Attempt::Unregistered);
        assert_eq!(answer(400, "BadDeviceToken"), Attempt::Invalid("BadDeviceToken"));
        assert_eq!(
            answer(400, "DeviceTokenNotForTopic"),
            Attempt::Invalid("DeviceTokenNotForTopic")
        );
        assert_eq!(
            answer(403, "ExpiredProviderToken"),
            Attempt::Reauthenticate("ExpiredProviderToken")
        );
        assert_eq!(
            answer(403, "InvalidProviderToken"),
            Attempt::Failed("InvalidProviderToken")
        );
        assert_eq!(answer(413, "PayloadTooLarge"), Attempt::Failed("PayloadTooLarge"));
        assert!(matches!(
            answer(503, "ServiceUnavailable"),
            Attempt::Retry { throttled: false, .. }
        ));
        // A reason a2 does not know still gets an answer.
        assert_eq!(answer(400, "InvalidPushType"), Attempt::Failed("BadRequest"));
    }

    #[test]
    fn only_apples_own_word_gives_a_token_up() {
        let none = HeaderMap::new();
        let status = |code| StatusCode::from_u16(code).unwrap();
        let page = b"<html><body><h1>410 Gone</h1></body></html>";
        assert_eq!(classify(status(410), &none, page), Attempt::Failed(NOT_APNS));
        assert_eq!(classify(status(410), &none, b""), Attempt::Failed(NOT_APNS));
        assert_eq!(
            classify(status(410), &none, br#"{"message":"gone"}"#),
            Attempt::Failed(NOT_APNS)
        );
        assert_eq!(classify(status(404), &none, page), Attempt::Failed(NOT_APNS));
        assert_eq!(classify(status(400), &none, page), Attempt::Failed(NOT_APNS));
        // Apple's word, but not `Unregistered`, with a 410.
        assert_eq!(answer(410, "BadDeviceToken"), Attempt::Failed("UnexpectedStatus"));
    }

    #[test]
    fn retry_after_is_read() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", "3".parse().unwrap());
        let attempt = classify(
            StatusCode::TOO_MANY_REQUESTS,
            &headers,
            br#"{"reason":"TooManyRequests"}"#,
        );
        assert_eq!(
            attempt,
            Attempt::Retry {
                reason: "TooManyRequests",
                after: Some(Duration::from_secs(3)),
                throttled: false
            },
            "a per-device limit: the process is not paused"
        );
    }
}
