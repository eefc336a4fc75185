//! What the coordinator does with the messages it consumes. Each handler is
//! run by `clarion_runtime::amqp::consumer::QueueConsumer`, one actor per
//! queue, which hands it one delivery at a time and reopens its channel
//! itself when the broker drops it (no actix `Supervisor`).

pub mod cleanup;
pub mod dead_letters;
pub mod reports;

use std::future::Future;
use std::time::Duration;

use clarion_runtime::backoff::Backoff;

use clarion_proto::names::headers;
use clarion_runtime::amqp::message::{header_text, trace_parent};
use lapin::message::Delivery;
use tracing::warn;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// How long a handler keeps retrying a database write before giving the
/// message back to the broker. Long enough to ride out a database restart.
const DATABASE_PATIENCE: Duration = Duration::from_secs(60);

/// Runs `op` until it succeeds or [`DATABASE_PATIENCE`] has passed.
pub(crate) async fn retry_database<T, E, F, Fut>(what: &str, mut op: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let deadline = tokio::time::Instant::now() + DATABASE_PATIENCE;
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        match op().await {
            Ok(value) => return Ok(value),
            Err(err) if tokio::time::Instant::now() < deadline => {
                let delay = backoff.next_delay();
                warn!(what, error = %err, retry_in_ms = delay.as_millis() as u64, "database write failed; retrying");
                tokio::time::sleep(delay).await;
            }
            Err(err) => return Err(err),
        }
    }
}

/// The span of processing one message: a child of the trace it carries.
pub(crate) fn process_span(delivery: &Delivery) -> tracing::Span {
    let kind = header_text(&delivery.properties, headers::MESSAGE_TYPE).unwrap_or_default();
    let notification = header_text(&delivery.properties, headers::NOTIFICATION_ID).unwrap_or_default();
    let span = tracing::info_span!(
        "process message",
        otel.name = %format!("process {kind}"),
        otel.kind = "consumer",
        messaging.system = "rabbitmq",
        messaging.operation.type = "process",
        messaging.destination.name = %delivery.exchange,
        messaging.message.type = %kind,
        notification.id = %notification,
    );
    let _ = span.set_parent(trace_parent(&delivery.properties));
    span
}

/// Counts one processed report (`kind`: job, delivery, cleanup, dead_letter).
pub(crate) fn count_report(kind: &'static str, outcome: &'static str) {
    metrics::counter!("clarion_coordinator_reports_total", "kind" => kind, "outcome" => outcome).increment(1);
}
