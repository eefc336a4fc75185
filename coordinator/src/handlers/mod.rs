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
use std::sync::atomic::{AtomicU64, Ordering};

use clarion_proto::names::headers;
use clarion_runtime::amqp::message::{header_text, trace_parent};
use lapin::message::Delivery;
use tracing::{error, info, warn};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use uuid::Uuid;

use crate::store::delivery::Completion;

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

/// Notifications completed by this process, and how many of them met 90in2.
static COMPLETED: AtomicU64 = AtomicU64::new(0);
static MET_NINETY_IN_TWO: AtomicU64 = AtomicU64::new(0);

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

/// Says loudly what completing a notification decided, and counts it.
pub(crate) fn log_completion(id: Uuid, completion: &Completion, invalid_threshold: f64) {
    let t = completion.timings;
    record_completion(completion);
    if completion.invalid_withheld {
        error!(
            notification.id = %id,
            invalid = completion.invalid,
            audience = completion.audience,
            threshold = invalid_threshold,
            "ALERT: too many tokens refused as invalid; suspecting Clarion's configuration \
             (bundle id, Firebase project, APNs environment) and deleting none of them"
        );
    }
    info!(
        notification.id = %id,
        audience = completion.audience,
        t50_ms = t.t50_ms,
        t90_ms = t.t90_ms,
        t99_ms = t.t99_ms,
        invalid = completion.invalid,
        invalid_deleted = completion.invalid_deleted,
        "notification complete"
    );
}

fn record_completion(completion: &Completion) {
    let t = completion.timings;
    for (quantile, ms) in [("t50", t.t50_ms), ("t90", t.t90_ms), ("t99", t.t99_ms)] {
        if let Some(ms) = ms {
            metrics::histogram!("clarion_coordinator_time_to_delivery_seconds", "quantile" => quantile)
                .record(f64::from(ms) / 1000.0);
        }
    }
    let completed = COMPLETED.fetch_add(1, Ordering::Relaxed) + 1;
    let met = if t.t90_ms.is_some_and(|ms| ms <= NINETY_IN_TWO_MS) {
        MET_NINETY_IN_TWO.fetch_add(1, Ordering::Relaxed) + 1
    } else {
        MET_NINETY_IN_TWO.load(Ordering::Relaxed)
    };
    metrics::counter!("clarion_coordinator_notifications_completed_total").increment(1);
    metrics::gauge!("clarion_coordinator_ninety_in_two_ratio").set(met as f64 / completed as f64);
    metrics::counter!("clarion_coordinator_registrations_deleted_total", "reason" => "invalid")
        .increment(completion.invalid_deleted);
}

/// The 90in2 bar: 90% of the reachable audience within two minutes.
pub const NINETY_IN_TWO_MS: u32 = 120_000;
