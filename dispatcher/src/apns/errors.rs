//! Apple's answers, read with `a2`'s error model, mapped to what the
//! dispatcher does next.

use a2::{ErrorBody, ErrorReason};
use http::{HeaderMap, StatusCode};

use crate::channel::{Attempt, retry_after};

pub fn classify(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Attempt {
    if status == StatusCode::OK {
        return Attempt::Accepted;
    }
    let reason = serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .map(|body| body.reason);
    match (status.as_u16(), reason) {
        (410, _) => Attempt::Unregistered,
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
        (400, _) => Attempt::Failed("BadRequest"),
        _ => Attempt::Failed("UnexpectedStatus"),
    }
}

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
