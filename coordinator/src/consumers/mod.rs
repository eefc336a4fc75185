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
use clarion_runtime::amqp::consumer::{dead_letter, requeue};
use clarion_runtime::amqp::message::{header_text, trace_parent};
use lapin::message::Delivery;
use tracing::{error, warn};

use crate::metrics;
use crate::store::StoreError;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// How long a handler keeps retrying a database write before giving the
/// message back to the broker. Long enough to ride out a database restart.
const DATABASE_PATIENCE: Duration = Duration::from_secs(60);

/// Runs `op` until it succeeds, fails for good (an error that is not
/// transient: retrying cannot help), or [`DATABASE_PATIENCE`] has passed.
pub(crate) async fn retry_database<T, F, Fut>(what: &str, mut op: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let deadline = tokio::time::Instant::now() + DATABASE_PATIENCE;
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        match op().await {
            Ok(value) => return Ok(value),
            Err(err) if err.is_transient() && tokio::time::Instant::now() < deadline => {
                let delay = backoff.next_delay();
                warn!(what, error = %err, retry_in_ms = delay.as_millis() as u64, "database write failed; retrying");
                tokio::time::sleep(delay).await;
            }
            Err(err) => return Err(err),
        }
    }
}

/// What to do with a message whose write failed: back to the queue when
/// the database may recover; parked in the queue's dead-letter queue at
/// once when the message itself makes the write fail (a poison message
/// must not hold up the others for minutes of retries).
pub(crate) async fn give_back(delivery: &Delivery, what: &str, err: &StoreError) {
    if err.is_transient() {
        requeue(delivery).await;
    } else {
        error!(what, error = %err, "message cannot be recorded; parked in its dead-letter queue");
        dead_letter(delivery, &format!("{what}: {err}")).await;
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
    metrics::REPORTS.with([kind, outcome]).increment(1);
}
