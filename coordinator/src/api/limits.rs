//! The limits the API enforces, written into the generated OpenAPI document
//! from the constants the validation itself uses (`clarion_proto`), so a
//! client — or schemathesis — can tell a valid request from the
//! description alone: token formats per platform, topic names, text and URL
//! rules, TTL range, sizes and counts, and that a replacement needs a
//! `send_at`. (That a `send_at` must lie in the next 30 days is said in
//! words: a schema cannot compare with the present.)

use clarion_proto::payload::{
    BODY_PATTERN, COLLAPSE_KEY_PATTERN, MAX_COLLAPSE_KEY_BYTES, MAX_IMAGE_URL_BYTES,
    MAX_TOPICS_PER_NOTIFICATION, MAX_TTL_SECONDS, MAX_URL_BYTES, RESERVED_DATA_KEY_PATTERN, TEXT_PATTERN,
    URL_PATTERN,
};
use clarion_proto::platform::{APNS_TOKEN_HEX_LEN, FCM_TOKEN_MAX_LEN, FCM_TOKEN_MIN_LEN, TOKEN_PATTERN};
use clarion_proto::topic::{MAX_TOPIC_LEN, TOPIC_PATTERN};
use serde_json::{Value, json};

/// A topic name.
fn topic() -> Value {
    json!({
        "type": "string",
        "pattern": TOPIC_PATTERN,
        "minLength": 1,
        "maxLength": MAX_TOPIC_LEN,
        "description": format!(
            "`/`-separated segments of letters, digits, `-`, `_`, `.` and `~`, at most {MAX_TOPIC_LEN} bytes"
        ),
    })
}

/// A device token in a path.
fn token() -> Value {
    json!({
        "type": "string",
        "pattern": TOKEN_PATTERN,
        "minLength": APNS_TOKEN_HEX_LEN,
        "maxLength": FCM_TOKEN_MAX_LEN,
    })
}

fn token_description() -> String {
    format!(
        "Device token: iOS (APNs) {APNS_TOKEN_HEX_LEN} hexadecimal characters (stored lowercase); \
         Android (FCM) {FCM_TOKEN_MIN_LEN} to {FCM_TOKEN_MAX_LEN} letters, digits, `-`, `_`, `:` and `.`"
    )
}

/// Adds the limits to `doc`, an OpenAPI document as JSON.
/// `max_topics_per_device` is the coordinator's `CLARION_MAX_TOPICS_PER_DEVICE`.
pub fn state_limits(doc: &mut Value, max_topics_per_device: u32) {
    state_path_parameters(doc);
    let text = json!({"pattern": TEXT_PATTERN});
    let link = json!({"pattern": URL_PATTERN, "maxLength": MAX_URL_BYTES});
    let image_url = json!({"pattern": URL_PATTERN, "maxLength": MAX_IMAGE_URL_BYTES});
    let send = "/components/schemas/SendRequest/properties";
    merge(
        doc,
        &format!("{send}/topics"),
        json!({
            "minItems": 1,
            "maxItems": MAX_TOPICS_PER_NOTIFICATION,
            "items": topic(),
        }),
    );
    merge(doc, &format!("{send}/title"), text.clone());
    merge(doc, &format!("{send}/body"), json!({"pattern": BODY_PATTERN}));
    merge(doc, &format!("{send}/link"), link);
    merge(doc, &format!("{send}/image_url"), image_url);
    merge(
        doc,
        &format!("{send}/priority"),
        json!({"enum": ["high", "normal", null]}),
    );
    merge(
        doc,
        &format!("{send}/ttl_seconds"),
        json!({"minimum": 0, "maximum": MAX_TTL_SECONDS}),
    );
    merge(
        doc,
        &format!("{send}/collapse_key"),
        json!({
            "pattern": COLLAPSE_KEY_PATTERN,
            "maxLength": MAX_COLLAPSE_KEY_BYTES,
        }),
    );
    merge(
        doc,
        &format!("{send}/data"),
        json!({
            "additionalProperties": {"type": "string", "pattern": TEXT_PATTERN},
            "propertyNames": {
                "minLength": 1,
                "pattern": TEXT_PATTERN,
                "not": {"pattern": RESERVED_DATA_KEY_PATTERN},
            },
        }),
    );
    // A replacement is a send request that must say when (`send_at`, not
    // null).
    if let Some(schema) = doc
        .pointer_mut("/paths/~1api~1v1~1notifications~1{id}/put/requestBody/content/application~1json/schema")
    {
        *schema = json!({
            "allOf": [
                schema.take(),
                {"required": ["send_at"], "properties": {"send_at": {"type": "string"}}},
            ],
        });
    }
    let register = "/components/schemas/RegistrationRequest/properties";
    merge(
        doc,
        &format!("{register}/platform"),
        json!({"enum": ["ios", "android"]}),
    );
    merge(
        doc,
        &format!("{register}/topics"),
        json!({
            "minItems": 1,
            "maxItems": max_topics_per_device,
            "items": topic(),
        }),
    );
    merge(
        doc,
        &format!("{register}/environment"),
        json!({"enum": ["production", "sandbox", null]}),
    );
}

/// Every `token` and `topic` path parameter gets its format.
fn state_path_parameters(doc: &mut Value) {
    let Some(paths) = doc.pointer_mut("/paths").and_then(Value::as_object_mut) else {
        return;
    };
    for item in paths.values_mut().filter_map(Value::as_object_mut) {
        for operation in item.values_mut() {
            let Some(parameters) = operation.get_mut("parameters").and_then(Value::as_array_mut) else {
                continue;
            };
            for parameter in parameters {
                let (schema, description) = match parameter["name"].as_str() {
                    Some("token") => (token(), token_description()),
                    Some("topic") => (topic(), "Topic name; may contain `/`".to_owned()),
                    _ => continue,
                };
                parameter["schema"] = schema;
                parameter["description"] = json!(description);
            }
        }
    }
}

/// Adds `fields` to the object at `pointer` (nothing when it is missing: a
/// renamed schema shows in the API tests, which check the limits are there).
fn merge(doc: &mut Value, pointer: &str, fields: Value) {
    if let (Some(Value::Object(target)), Value::Object(fields)) = (doc.pointer_mut(pointer), fields) {
        target.extend(fields);
    }
}
