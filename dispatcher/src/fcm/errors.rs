//! Google's answers (`error.status` and `error.details[].errorCode`) mapped
//! to what the dispatcher does next.

use http::{HeaderMap, StatusCode};
use serde::Deserialize;

use crate::channel::{Attempt, retry_after};

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: GoogleError,
}

#[derive(Deserialize)]
struct GoogleError {
    #[serde(default)]
    details: Vec<Detail>,
}

#[derive(Deserialize)]
struct Detail {
    #[serde(rename = "errorCode")]
    error_code: Option<String>,
}

pub fn classify(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Attempt {
    if status == StatusCode::OK {
        return Attempt::Accepted;
    }
    let code = serde_json::from_slice::<ErrorEnvelope>(body)
        .ok()
        .and_then(|envelope| envelope.error.details.into_iter().find_map(|d| d.error_code));
    let retry = |reason, throttled| Attempt::Retry {
        reason,
        after: retry_after(headers),
        throttled,
    };
    match (status.as_u16(), code.as_deref()) {
        (_, Some("UNREGISTERED")) | (404, _) => Attempt::Unregistered,
        (_, Some("SENDER_ID_MISMATCH")) => Attempt::Invalid("SENDER_ID_MISMATCH"),
        (_, Some("INVALID_ARGUMENT")) | (400, _) => Attempt::Invalid("INVALID_ARGUMENT"),
        (_, Some("THIRD_PARTY_AUTH_ERROR")) => Attempt::Failed("THIRD_PARTY_AUTH_ERROR"),
        (401, _) => Attempt::Reauthenticate("UNAUTHENTICATED"),
        (403, _) => Attempt::Failed("PERMISSION_DENIED"),
        (429, _) | (_, Some("QUOTA_EXCEEDED")) => retry("QUOTA_EXCEEDED", true),
        (503, _) => retry("UNAVAILABLE", false),
        (500, _) => retry("INTERNAL", false),
        _ => Attempt::Failed("UnexpectedStatus"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, code: Option<&str>) -> Attempt {
        let body = match code {
            Some(code) => format!(
                r#"{{"error":{{"code":{status},"status":"X","details":[{{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"{code}"}}]}}}}"#
            ),
            None => format!(r#"{{"error":{{"code":{status},"status":"X"}}}}"#),
        };
        classify(
            StatusCode::from_u16(status).unwrap(),
            &HeaderMap::new(),
            body.as_bytes(),
        )
    }

    #[test]
    fn google_codes_map_to_actions() {
        assert_eq!(answer(404, Some("UNREGISTERED")), Attempt::Unregistered);
        assert_eq!(
            answer(400, Some("INVALID_ARGUMENT")),
            Attempt::Invalid("INVALID_ARGUMENT")
        );
        assert_eq!(
            answer(403, Some("SENDER_ID_MISMATCH")),
            Attempt::Invalid("SENDER_ID_MISMATCH")
        );
        assert_eq!(
            answer(401, Some("THIRD_PARTY_AUTH_ERROR")),
            Attempt::Failed("THIRD_PARTY_AUTH_ERROR")
        );
        assert_eq!(answer(401, None), Attempt::Reauthenticate("UNAUTHENTICATED"));
        assert_eq!(answer(403, None), Attempt::Failed("PERMISSION_DENIED"));
        assert!(matches!(
            answer(429, Some("QUOTA_EXCEEDED")),
            Attempt::Retry { throttled: true, .. }
        ));
        assert!(matches!(
            answer(503, Some("UNAVAILABLE")),
            Attempt::Retry { throttled: false, .. }
        ));
        assert!(matches!(answer(500, Some("INTERNAL")), Attempt::Retry { .. }));
    }
}
