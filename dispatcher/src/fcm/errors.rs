//! Google's answers (`error.status` and `error.details[]`) mapped to what
//! the dispatcher does next.
//!
//! A token is given up only on Google's explicit, well-formed word about
//! it: 404 with the `FcmError` `UNREGISTERED` (gone), 400 `INVALID_ARGUMENT`
//! naming the registration token (invalid), 403 `SENDER_ID_MISMATCH` (a
//! token of another project: invalid, held for the safety valve). Any other
//! answer — a 404 with no Google body, an HTML page, another server's JSON,
//! an `INVALID_ARGUMENT` about the message rather than the token — keeps
//! the token and fails the push with a reason: that is what a wrong
//! `CLARION_FCM_ENDPOINT` or a bad payload looks like, not a dead device.

use http::{HeaderMap, StatusCode};
use serde::Deserialize;

use crate::channel::{Attempt, retry_after};

/// The `@type` of FCM's own error detail.
const FCM_ERROR: &str = "type.googleapis.com/google.firebase.fcm.v1.FcmError";
/// The field Google names when the registration token is at fault.
const TOKEN_FIELD: &str = "message.token";

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: GoogleError,
}

#[derive(Deserialize)]
struct GoogleError {
    #[serde(default)]
    message: String,
    #[serde(default)]
    details: Vec<Detail>,
}

#[derive(Deserialize)]
struct Detail {
    #[serde(rename = "@type", default)]
    kind: String,
    #[serde(rename = "errorCode")]
    error_code: Option<String>,
    #[serde(rename = "fieldViolations", default)]
    field_violations: Vec<FieldViolation>,
}

#[derive(Deserialize)]
struct FieldViolation {
    #[serde(default)]
    field: String,
}

impl GoogleError {
    /// The `FcmError` code, when Google sent one.
    fn fcm_code(&self) -> Option<&str> {
        self.details
            .iter()
            .filter(|d| d.kind == FCM_ERROR)
            .find_map(|d| d.error_code.as_deref())
    }

    /// Whether the error is about the registration token (not the message).
    fn names_the_token(&self) -> bool {
        let violation = self
            .details
            .iter()
            .flat_map(|d| &d.field_violations)
            .any(|v| v.field == TOKEN_FIELD);
        violation || self.message.contains("registration token")
    }
}

pub fn classify(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Attempt {
    if status == StatusCode::OK {
        return Attempt::Accepted;
    }
    let google = serde_json::from_slice::<ErrorEnvelope>(body)
        .ok()
        .map(|e| e.error);
    let code = google.as_ref().and_then(GoogleError::fcm_code);
    let names_the_token = google.as_ref().is_some_and(GoogleError::names_the_token);
    let retry = |reason, throttled| Attempt::Retry {
        reason,
        after: retry_after(headers),
        throttled,
    };
    match (status.as_u16(), code) {
        (404, Some("UNREGISTERED")) => Attempt::Unregistered,
        (400, Some("INVALID_ARGUMENT")) if names_the_token => Attempt::Invalid("INVALID_ARGUMENT"),
        (400, Some("INVALID_ARGUMENT")) => Attempt::Failed("INVALID_ARGUMENT"),
        (403, Some("SENDER_ID_MISMATCH")) => Attempt::Invalid("SENDER_ID_MISMATCH"),
        (_, Some("THIRD_PARTY_AUTH_ERROR")) => Attempt::Failed("THIRD_PARTY_AUTH_ERROR"),
        (401, _) => Attempt::Reauthenticate("UNAUTHENTICATED"),
        (429, _) | (_, Some("QUOTA_EXCEEDED")) => retry("QUOTA_EXCEEDED", true),
        (503, _) => retry("UNAVAILABLE", false),
        (500, _) => retry("INTERNAL", false),
        // Not Google's JSON at all: a wrong endpoint, a proxy, another
        // service. The token is kept.
        _ if google.is_none() => Attempt::Failed(NOT_FCM),
        (403, _) => Attempt::Failed("PERMISSION_DENIED"),
        // Google-shaped, but not about this token (a wrong project id).
        (404, _) => Attempt::Failed("NOT_FOUND"),
        _ => Attempt::Failed("UnexpectedStatus"),
    }
}

/// The failure reason of an answer that is not FCM's: the endpoint is
/// probably not FCM (`CLARION_FCM_ENDPOINT`).
pub const NOT_FCM: &str = "NotFcmAnswer";

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, code: Option<&str>) -> Attempt {
        let body = match code {
            Some(code) => format!(
                r#"{{"error":{{"code":{status},"message":"The registration token is not a valid FCM registration token","status":"X","details":[{{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"{code}"}}]}}}}"#
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

    #[test]
    fn only_googles_own_word_gives_a_token_up() {
        let none = HeaderMap::new();
        let status = |code| StatusCode::from_u16(code).unwrap();
        // A web server that is not FCM.
        let page = b"<html><body><h1>404 Not Found</h1></body></html>";
        assert_eq!(classify(status(404), &none, page), Attempt::Failed(NOT_FCM));
        assert_eq!(classify(status(404), &none, b""), Attempt::Failed(NOT_FCM));
        // Another service's JSON, even with an error object.
        let other = br#"{"error":{"code":404,"message":"Not found","status":"NOT_FOUND"}}"#;
        assert_eq!(classify(status(404), &none, other), Attempt::Failed("NOT_FOUND"));
        assert_eq!(
            classify(status(410), &none, br#"{"gone":true}"#),
            Attempt::Failed(NOT_FCM)
        );
        assert_eq!(classify(status(400), &none, page), Attempt::Failed(NOT_FCM));
        // UNREGISTERED only with a 404.
        assert_eq!(
            answer(400, Some("UNREGISTERED")),
            Attempt::Failed("UnexpectedStatus")
        );
        // INVALID_ARGUMENT about the message, not the token, keeps the token.
        let payload = br#"{"error":{"code":400,"message":"Invalid value at 'message.android.ttl'","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"INVALID_ARGUMENT"}]}}"#;
        assert_eq!(
            classify(status(400), &none, payload),
            Attempt::Failed("INVALID_ARGUMENT")
        );
        // ... and one naming the token by its field gives it up.
        let field = br#"{"error":{"code":400,"message":"Invalid","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"INVALID_ARGUMENT"},{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"message.token","description":"Invalid registration token"}]}]}}"#;
        assert_eq!(
            classify(status(400), &none, field),
            Attempt::Invalid("INVALID_ARGUMENT")
        );
    }
}
