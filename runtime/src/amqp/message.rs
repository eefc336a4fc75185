//! AMQP message properties and headers: building them for Clarion's
//! messages and reading them back.

use clarion_proto::codec::CONTENT_TYPE;
use clarion_proto::names::{TRACE_HEADERS, headers};
use clarion_proto::trace_context;
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use uuid::Uuid;

/// Persistent delivery mode.
const PERSISTENT: u8 = 2;

/// Properties of a Clarion message: JSON, persistent, typed, tagged with
/// its notification, and carrying the trace context of the current span.
pub fn properties(message_type: &str, notification_id: Uuid) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert(headers::MESSAGE_TYPE.into(), text(message_type));
    headers.insert(
        headers::NOTIFICATION_ID.into(),
        text(&notification_id.to_string()),
    );
    for (name, value) in trace_context::inject(&tracing::Span::current().context()) {
        headers.insert(name.into(), text(&value));
    }
    BasicProperties::default()
        .with_content_type(CONTENT_TYPE.into())
        .with_delivery_mode(PERSISTENT)
        .with_headers(headers)
}

/// A string header, if present.
pub fn header_text(properties: &BasicProperties, name: &str) -> Option<String> {
    match properties.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongString(value) => Some(String::from_utf8_lossy(value.as_bytes()).into_owned()),
        AMQPValue::ShortString(value) => Some(value.as_str().to_owned()),
        _ => None,
    }
}

/// The trace context a message carries (empty when it carries none).
pub fn trace_parent(properties: &BasicProperties) -> opentelemetry::Context {
    let values: Vec<(&str, String)> = TRACE_HEADERS
        .iter()
        .filter_map(|name| header_text(properties, name).map(|value| (*name, value)))
        .collect();
    trace_context::extract(|name| values.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str()))
}

/// How many times the broker delivered this message before (quorum queues
/// count returns and consumer crashes in `x-delivery-count`).
pub fn delivery_count(properties: &BasicProperties) -> u32 {
    let value = properties
        .headers()
        .as_ref()
        .and_then(|headers| headers.inner().get(headers::DELIVERY_COUNT).cloned());
    match value {
        Some(AMQPValue::LongLongInt(n)) => u32::try_from(n).unwrap_or(u32::MAX),
        Some(AMQPValue::LongInt(n)) => u32::try_from(n).unwrap_or(u32::MAX),
        Some(AMQPValue::LongUInt(n)) => n,
        Some(AMQPValue::ShortInt(n)) => u32::try_from(n).unwrap_or(0),
        Some(AMQPValue::ShortUInt(n)) => u32::from(n),
        _ => 0,
    }
}

fn text(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let id = Uuid::from_u128(42);
        let props = properties("shard_job", id);
        assert_eq!(
            header_text(&props, headers::MESSAGE_TYPE).as_deref(),
            Some("shard_job")
        );
        assert_eq!(
            header_text(&props, headers::NOTIFICATION_ID),
            Some(id.to_string())
        );
        assert_eq!(delivery_count(&props), 0);
        let mut table = FieldTable::default();
        table.insert(headers::DELIVERY_COUNT.into(), AMQPValue::LongLongInt(3));
        assert_eq!(delivery_count(&BasicProperties::default().with_headers(table)), 3);
    }
}
