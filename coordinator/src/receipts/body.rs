//! Reading a receipts request body: 1 to [`MAX_RECEIPTS`] receipts, each
//! checked field by field so a refusal names the field at fault
//! (`receipts[3].event`).

use chrono::{DateTime, Utc};
use clarion_proto::platform::{canonical_token, is_plausible_token};
use serde_json::Value;
use uuid::Uuid;

/// Most receipts one request may carry (an app sends the few that waited
/// while it was offline; a mock phone farm batches).
pub const MAX_RECEIPTS: usize = 500;

/// What a device says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event {
    Received,
    Opened,
}

impl Event {
    pub const ALL: [Event; 2] = [Event::Received, Event::Opened];

    pub fn as_str(self) -> &'static str {
        match self {
            Event::Received => "received",
            Event::Opened => "opened",
        }
    }
}

/// One receipt as the device sent it (token in canonical form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub notification_id: Uuid,
    pub token: String,
    pub event: Event,
    /// When the device says it happened; clamped later.
    pub at: Option<DateTime<Utc>>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// More than [`MAX_RECEIPTS`] (a 413).
    #[error("a request carries at most {MAX_RECEIPTS} receipts; got {0}: send them in several requests")]
    TooMany(usize),
    /// A field missing or wrong (a 422 naming it).
    #[error("`{field}`: {problem}")]
    Field { field: String, problem: String },
}

fn field_error(field: impl Into<String>, problem: impl Into<String>) -> BodyError {
    BodyError::Field {
        field: field.into(),
        problem: problem.into(),
    }
}

/// The receipts of a request body.
pub fn parse(body: &Value) -> Result<Vec<Receipt>, BodyError> {
    let object = body
        .as_object()
        .ok_or_else(|| field_error("(body)", "expected an object {\"receipts\": [...]}"))?;
    if let Some(unknown) = object.keys().find(|key| key.as_str() != "receipts") {
        return Err(field_error(
            unknown.as_str(),
            "unknown field; the body has only `receipts`",
        ));
    }
    let list = object
        .get("receipts")
        .ok_or_else(|| field_error("receipts", "missing"))?
        .as_array()
        .ok_or_else(|| field_error("receipts", "expected an array of receipts"))?;
    if list.len() > MAX_RECEIPTS {
        return Err(BodyError::TooMany(list.len()));
    }
    if list.is_empty() {
        return Err(field_error("receipts", "at least one receipt is needed"));
    }
    list.iter()
        .enumerate()
        .map(|(index, item)| parse_one(index, item))
        .collect()
}

fn parse_one(index: usize, item: &Value) -> Result<Receipt, BodyError> {
    let name = |field: &str| format!("receipts[{index}].{field}");
    let object = item
        .as_object()
        .ok_or_else(|| field_error(format!("receipts[{index}]"), "expected an object"))?;
    const FIELDS: [&str; 4] = ["notification_id", "token", "event", "at"];
    if let Some(unknown) = object.keys().find(|key| !FIELDS.contains(&key.as_str())) {
        return Err(field_error(name(unknown), "unknown field"));
    }
    let text = |field: &str| -> Result<&str, BodyError> {
        object
            .get(field)
            .ok_or_else(|| field_error(name(field), "missing"))?
            .as_str()
            .ok_or_else(|| field_error(name(field), "expected a string"))
    };
    let notification_id = text("notification_id")?
        .parse::<Uuid>()
        .map_err(|_| field_error(name("notification_id"), "not a UUID"))?;
    let token = text("token")?;
    if !is_plausible_token(token) {
        return Err(field_error(
            name("token"),
            "not a device token: expected 64 hex characters (iOS) or an FCM registration token (Android)",
        ));
    }
    let event = match text("event")? {
        "received" => Event::Received,
        "opened" => Event::Opened,
        other => {
            return Err(field_error(
                name("event"),
                format!("unknown event {other:?}; expected `received` or `opened`"),
            ));
        }
    };
    let at = match object.get("at") {
        None | Some(Value::Null) => None,
        Some(Value::String(at)) => Some(
            DateTime::parse_from_rfc3339(at)
                .map_err(|_| field_error(name("at"), "not an RFC 3339 time"))?
                .with_timezone(&Utc),
        ),
        Some(_) => return Err(field_error(name("at"), "expected an RFC 3339 time string")),
    };
    Ok(Receipt {
        notification_id,
        token: canonical_token(token),
        event,
        at,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const TOKEN: &str = "00000000000000010000000000000000000000000000000000000000000000aa";

    fn receipt(event: &str) -> Value {
        json!({"notification_id": Uuid::nil(), "token": TOKEN, "event": event})
    }

    fn field_of(body: Value) -> String {
        match parse(&body) {
            Err(BodyError::Field { field, .. }) => field,
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn a_good_body_is_read_with_canonical_tokens_and_optional_times() {
        let mut second = receipt("opened");
        second["at"] = json!("2026-12-04T10:00:00+01:00");
        second["token"] = json!(TOKEN.to_uppercase());
        let receipts = parse(&json!({"receipts": [receipt("received"), second]})).unwrap();
        assert_eq!(receipts.len(), 2);
        assert_eq!(receipts[0].event, Event::Received);
        assert_eq!(receipts[0].at, None);
        assert_eq!(receipts[1].token, TOKEN);
        assert_eq!(receipts[1].at.unwrap().to_rfc3339(), "2026-12-04T09:00:00+00:00");
    }

    #[test]
    fn each_fault_names_its_field() {
        assert_eq!(field_of(json!([])), "(body)");
        assert_eq!(field_of(json!({})), "receipts");
        assert_eq!(field_of(json!({"receipts": []})), "receipts");
        assert_eq!(field_of(json!({"receipts": [], "x": 1})), "x");
        assert_eq!(
            field_of(json!({"receipts": [receipt("seen")]})),
            "receipts[0].event"
        );
        let mut bad = receipt("received");
        bad["notification_id"] = json!("nope");
        assert_eq!(
            field_of(json!({"receipts": [receipt("opened"), bad]})),
            "receipts[1].notification_id"
        );
        let mut bad = receipt("received");
        bad["token"] = json!("short");
        assert_eq!(field_of(json!({"receipts": [bad]})), "receipts[0].token");
        let mut bad = receipt("received");
        bad["at"] = json!("yesterday");
        assert_eq!(field_of(json!({"receipts": [bad]})), "receipts[0].at");
        let mut bad = receipt("received");
        bad["extra"] = json!(1);
        assert_eq!(field_of(json!({"receipts": [bad]})), "receipts[0].extra");
        let mut bad = receipt("received");
        bad.as_object_mut().unwrap().remove("token");
        assert_eq!(field_of(json!({"receipts": [bad]})), "receipts[0].token");
    }

    #[test]
    fn more_than_five_hundred_is_too_many_and_five_hundred_is_fine() {
        let list = |n: usize| json!({"receipts": vec![receipt("received"); n]});
        assert_eq!(parse(&list(MAX_RECEIPTS)).unwrap().len(), MAX_RECEIPTS);
        assert_eq!(parse(&list(MAX_RECEIPTS + 1)), Err(BodyError::TooMany(501)));
    }
}
