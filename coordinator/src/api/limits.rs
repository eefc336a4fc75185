//! The limits the API enforces, written into the generated OpenAPI document
//! from the constants the validation itself uses (`clarion_proto`), so a
//! client — or schemathesis — can tell a valid request from the
//! description alone: token formats per platform, topic names, text and URL
//! rules, TTL range, sizes and counts, and that a replacement needs a
//! `send_at`. (That a `send_at` must lie in the next 30 days is said in
//! words: a schema cannot compare with the present.)

use clarion_proto::Platform;
use clarion_proto::RegistrationKind;
use clarion_proto::locale::{LOCALE_PATTERN, MAX_LOCALE_BYTES, MAX_LOCALIZATIONS};
use clarion_proto::payload::{
    BODY_PATTERN, COLLAPSE_KEY_PATTERN, MAX_COLLAPSE_KEY_BYTES, MAX_IMAGE_URL_BYTES,
    MAX_TOPICS_PER_NOTIFICATION, MAX_TTL_SECONDS, MAX_URL_BYTES, RESERVED_DATA_KEY_PATTERN, TEXT_PATTERN,
    URL_PATTERN,
};
use clarion_proto::platform::{
    FCM_TOKEN_MAX_LEN, TOKEN_PATTERN, WEB_TOKEN_MIN_LEN, segments, token_description,
};
use clarion_proto::presentation::{MAX_BADGE, MAX_NAME_BYTES, NAME_PATTERN};
use clarion_proto::registration_kind::{ATTRIBUTES_TYPE_PATTERN, MAX_ATTRIBUTES_TYPE_BYTES};
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
        "minLength": WEB_TOKEN_MIN_LEN,
        "maxLength": FCM_TOKEN_MAX_LEN,
    })
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
    let name = json!({"pattern": NAME_PATTERN, "maxLength": MAX_NAME_BYTES});
    for field in ["category", "android_channel_id"] {
        merge(doc, &format!("{send}/{field}"), name.clone());
    }
    merge(doc, &format!("{send}/sound"), name);
    merge(
        doc,
        &format!("{send}/badge"),
        json!({"minimum": 0, "maximum": MAX_BADGE}),
    );
    merge(
        doc,
        &format!("{send}/relevance_score"),
        json!({"minimum": 0, "maximum": 1}),
    );
    merge(
        doc,
        &format!("{send}/push_type"),
        json!({"enum": ["alert", "background", null]}),
    );
    merge(
        doc,
        &format!("{send}/interruption_level"),
        json!({"enum": ["passive", "active", "time-sensitive", null]}),
    );
    merge(
        doc,
        &format!("{send}/localizations"),
        json!({
            "maxProperties": MAX_LOCALIZATIONS,
            "propertyNames": {"pattern": LOCALE_PATTERN, "maxLength": MAX_LOCALE_BYTES},
        }),
    );
    let localized = "/components/schemas/LocalizedBody/properties";
    merge(doc, &format!("{localized}/title"), text.clone());
    merge(
        doc,
        &format!("{localized}/body"),
        json!({"pattern": BODY_PATTERN}),
    );
    state_background_rule(doc);
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
        &format!("{register}/locale"),
        json!({"pattern": LOCALE_PATTERN, "maxLength": MAX_LOCALE_BYTES}),
    );
    let platforms: Vec<&str> = Platform::ALL.iter().map(|p| p.as_str()).collect();
    merge(
        doc,
        &format!("{register}/platform"),
        json!({
            "enum": platforms,
            "example": platforms.first(),
            "description": format!("{}.", in_words(&platforms)),
        }),
    );
    merge(
        doc,
        "/components/schemas/HeldSegment/properties/segment",
        json!({"example": segments().next()}),
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
    // A push-to-start token (issue 38). That `push_to_start` is iOS only and
    // needs `attributes_type`, which `device` refuses, ties fields together:
    // said in words here, kept by scripts/schemathesis_hooks.py in the
    // positive cases, its 422s tested in coordinator/tests/api/push_to_start.rs.
    let kinds: Vec<Value> = RegistrationKind::ALL
        .iter()
        .map(|kind| json!(kind.as_str()))
        .chain([Value::Null])
        .collect();
    merge(
        doc,
        &format!("{register}/kind"),
        json!({
            "enum": kinds,
            "description": "`device` (default: alerts) or, on `ios` only, `push_to_start` \
                            (Live Activity starts of its `attributes_type`, never an alert)",
        }),
    );
    merge(
        doc,
        &format!("{register}/attributes_type"),
        json!({
            "pattern": ATTRIBUTES_TYPE_PATTERN,
            "maxLength": MAX_ATTRIBUTES_TYPE_BYTES,
            "description": "Required with `kind: push_to_start`, refused otherwise: the ActivityAttributes type",
        }),
    );
    // A browser's `PushSubscription`: its shape (the key's point and the
    // host rule are checked by the coordinator, 422).
    let base64url = json!({"type": "string", "pattern": "^[A-Za-z0-9_-]+=*$"});
    merge(
        doc,
        &format!("{register}/subscription"),
        json!({
            "required": ["endpoint", "keys"],
            "properties": {
                "endpoint": {"type": "string", "pattern": "^https://"},
                "expirationTime": {"type": ["number", "null"]},
                "keys": {
                    "type": "object",
                    "required": ["p256dh", "auth"],
                    "properties": {"p256dh": base64url, "auth": base64url},
                },
            },
        }),
    );
    merge(
        doc,
        &format!("{send}/web"),
        json!({
            "additionalProperties": false,
            "properties": {"declarative": {"type": "boolean"}},
        }),
    );
    let mut receipt_token = token();
    receipt_token["description"] = json!(token_description());
    merge(
        doc,
        "/components/schemas/ReceiptItem/properties/token",
        receipt_token,
    );
    state_live_activity_limits(doc);
}

/// The rules of a Live Activity's create and update that a schema can
/// state. (Those it cannot: the start push and an update at most 4096 bytes
/// once built, a `dismissal_date` not before the `stale_date`, and the
/// text of the start push, `name` when there is no `alert`.)
fn state_live_activity_limits(doc: &mut Value) {
    let create = "/components/schemas/CreateRequest/properties";
    merge(
        doc,
        &format!("{create}/topics"),
        json!({"minItems": 1, "maxItems": MAX_TOPICS_PER_NOTIFICATION, "items": topic()}),
    );
    merge(doc, &format!("{create}/name"), json!({"pattern": "\\S"}));
    merge(
        doc,
        &format!("{create}/attributes_type"),
        json!({"pattern": ATTRIBUTES_TYPE_PATTERN, "maxLength": MAX_ATTRIBUTES_TYPE_BYTES}),
    );
    merge(
        doc,
        &format!("{create}/storage_policy"),
        json!({"enum": ["none", "most-recent", null]}),
    );
    merge(
        doc,
        &format!("{create}/stale_after_seconds"),
        json!({"minimum": 1, "maximum": MAX_TTL_SECONDS}),
    );
    let update = "/components/schemas/UpdateRequest/properties";
    merge(
        doc,
        &format!("{update}/event"),
        json!({"enum": ["update", "end", null]}),
    );
    merge(doc, &format!("{update}/priority"), json!({"enum": [5, 10, null]}));
    merge(
        doc,
        &format!("{update}/relevance_score"),
        json!({"minimum": 0, "maximum": 1}),
    );
}

/// Writes the apps this installation serves (`default` first, then those
/// of CLARION_APPS_FILE) into `doc` as the values an `app` takes: the
/// query parameter of every operation that has one, and the `app` of a
/// send and of a registration (which may also be null or left out). An
/// app outside the list is a 404 on a read or a delete and a 422 on a
/// write.
pub fn state_apps(doc: &mut Value, served: &[String]) {
    let described = format!(
        "The app (`default` when absent): one of those this installation serves, {} \
         (`default` and CLARION_APPS_FILE); another is a 404 on a read or a delete, a 422 on a write",
        served.join(", ")
    );
    if let Some(paths) = doc.pointer_mut("/paths").and_then(Value::as_object_mut) {
        let parameters = paths
            .values_mut()
            .filter_map(Value::as_object_mut)
            .flat_map(|item| item.values_mut())
            .filter_map(|operation| operation.get_mut("parameters").and_then(Value::as_array_mut))
            .flatten()
            .filter(|parameter| parameter["name"] == "app");
        for parameter in parameters {
            parameter["schema"] = json!({"type": "string", "enum": served});
            parameter["description"] = json!(described);
        }
    }
    let mut nullable: Vec<Value> = served.iter().map(|app| json!(app)).collect();
    nullable.push(Value::Null);
    for schema in ["SendRequest", "RegistrationRequest", "CreateRequest"] {
        merge(
            doc,
            &format!("/components/schemas/{schema}/properties/app"),
            json!({"enum": nullable, "description": described}),
        );
    }
}

/// An alert needs a `body`; a background push takes none of the fields that
/// show something, and no `high` priority.
fn state_background_rule(doc: &mut Value) {
    let Some(schema) = doc
        .pointer_mut("/components/schemas/SendRequest")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let shown = [
        "title",
        "body",
        "image_url",
        "badge",
        "category",
        "interruption_level",
        "relevance_score",
        "android_channel_id",
    ];
    let mut forbidden: Vec<Value> = shown
        .iter()
        .map(|field| json!({"required": [field], "properties": {*field: {"not": {"type": "null"}}}}))
        .collect();
    forbidden
        .push(json!({"required": ["localizations"], "properties": {"localizations": {"minProperties": 1}}}));
    schema.insert(
        "if".into(),
        json!({"required": ["push_type"], "properties": {"push_type": {"const": "background"}}}),
    );
    schema.insert(
        "then".into(),
        json!({
            "properties": {
                "sound": {"type": "null"},
                "priority": {"enum": ["normal", null]},
            },
            "not": {"anyOf": forbidden},
        }),
    );
    schema.insert("else".into(), json!({"required": ["body"]}));
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
                    Some("segment") => {
                        let mut schema = parameter["schema"].take();
                        schema["pattern"] =
                            json!(format!("^({})$", segments().collect::<Vec<_>>().join("|")));
                        let names: Vec<String> = segments().map(|s| format!("`{s}`")).collect();
                        let description =
                            format!("Only this segment ({}); all when absent.", names.join(", "));
                        (schema, description)
                    }
                    _ => continue,
                };
                parameter["schema"] = schema;
                parameter["description"] = json!(description);
            }
        }
    }
}

/// `names` in backticks, the last after "or": `` `a`, `b` or `c` ``.
fn in_words(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Adds `fields` to the object at `pointer` (nothing when it is missing: a
/// renamed schema shows in the API tests, which check the limits are there).
fn merge(doc: &mut Value, pointer: &str, fields: Value) {
    if let (Some(Value::Object(target)), Value::Object(fields)) = (doc.pointer_mut(pointer), fields) {
        target.extend(fields);
    }
}
