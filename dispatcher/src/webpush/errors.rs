//! Push services' answers (RFC 8030 §5, §8) mapped to what the dispatcher
//! does next. 404 and 410 are the push service's word that the
//! subscription is gone: the token goes through the cleanup path and its
//! safety valve. 401 and 403 refuse Clarion's VAPID credentials: never a
//! cleanup, the breaker judges them. 400 and 413 fail that push for good;
//! 429 and 5xx are retried, `Retry-After` honoured and capped by delivery.

use http::{HeaderMap, StatusCode};

use crate::channel::{Attempt, retry_after};

/// The failure label of an answer no push service gives.
pub const NOT_A_PUSH_SERVICE: &str = "not_a_push_service";
/// Our VAPID credentials were refused.
pub const VAPID_REFUSED: &str = "vapid_refused";

pub fn classify(status: StatusCode, headers: &HeaderMap) -> Attempt {
    match status.as_u16() {
        200..=299 => Attempt::Accepted,
        404 | 410 => Attempt::Unregistered,
        401 | 403 => Attempt::Failed(VAPID_REFUSED),
        400 => Attempt::Failed("bad_request"),
        413 => Attempt::Failed("payload_too_large"),
        429 => Attempt::Retry {
            reason: "too_many_requests",
            after: retry_after(headers),
            throttled: true,
        },
        500..=599 => Attempt::Retry {
            reason: "server_error",
            after: retry_after(headers),
            throttled: false,
        },
        _ => Attempt::Failed(NOT_A_PUSH_SERVICE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_as_rfc_8030_says() {
        let none = HeaderMap::new();
        assert_eq!(classify(StatusCode::CREATED, &none), Attempt::Accepted);
        assert_eq!(classify(StatusCode::GONE, &none), Attempt::Unregistered);
        assert_eq!(classify(StatusCode::NOT_FOUND, &none), Attempt::Unregistered);
        assert_eq!(
            classify(StatusCode::UNAUTHORIZED, &none),
            Attempt::Failed(VAPID_REFUSED)
        );
        assert_eq!(
            classify(StatusCode::FORBIDDEN, &none),
            Attempt::Failed(VAPID_REFUSED)
        );
        assert_eq!(
            classify(StatusCode::PAYLOAD_TOO_LARGE, &none),
            Attempt::Failed("payload_too_large")
        );
        let mut later = HeaderMap::new();
        later.insert(http::header::RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(
            classify(StatusCode::TOO_MANY_REQUESTS, &later),
            Attempt::Retry {
                reason: "too_many_requests",
                after: Some(std::time::Duration::from_secs(7)),
                throttled: true
            }
        );
        assert!(matches!(
            classify(StatusCode::BAD_GATEWAY, &none),
            Attempt::Retry { .. }
        ));
        assert_eq!(
            classify(StatusCode::MOVED_PERMANENTLY, &none),
            Attempt::Failed(NOT_A_PUSH_SERVICE)
        );
    }
}
