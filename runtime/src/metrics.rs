//! Prometheus metrics: one recorder per process (the `metrics` facade with
//! `metrics-exporter-prometheus`), rendered at `GET /metrics` by every
//! service. Names follow `clarion_<subsystem>_<name>_<unit>`; labels have
//! fixed, low-cardinality values (never a token, key or error text).
//!
//! Each service names every metric it emits — name, help and label names —
//! in its own `metrics.rs` with [`CounterVec`], [`GaugeVec`] and
//! [`HistogramVec`] (as quickwit's `metrics.rs` does); nothing else in a
//! service spells a metric name.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use actix_web::{HttpResponse, get, web};
use metrics::{Label, SharedString};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::db::PgPool;

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process's recorder (once; later calls reuse it). `None`
/// when another recorder was installed first.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(&[
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                ])
                .ok()?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            Some(handle)
        })
        .clone()
}

/// Adds `GET /metrics` to an actix-web app.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(render);
}

/// Prometheus text exposition of this process's metrics.
#[utoipa::path(tag = "health", responses((status = 200, description = "Prometheus metrics", content_type = "text/plain")))]
#[get("/metrics")]
pub async fn render() -> HttpResponse {
    match install() {
        Some(handle) => HttpResponse::Ok()
            .content_type("text/plain; version=0.0.4")
            .body(handle.render()),
        None => HttpResponse::ServiceUnavailable().body("no metrics recorder in this process"),
    }
}

/// Publishes the database pool's state every few seconds, for as long as
/// the returned task runs.
pub fn watch_pool(pool: PgPool, service: &'static str) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let state = pool.state();
            let idle = f64::from(state.idle_connections);
            let open = f64::from(state.connections);
            metrics::gauge!("clarion_db_pool_connections", "service" => service, "state" => "idle").set(idle);
            metrics::gauge!("clarion_db_pool_connections", "service" => service, "state" => "in_use")
                .set(open - idle);
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    })
}

/// How long the broker gets to answer how many messages and consumers a
/// queue has.
const QUEUE_WATCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Publishes how many messages wait in `queue` (consumer lag) every few
/// seconds, for as long as the returned task runs.
pub fn watch_queue(link: crate::BrokerLink, queue: String) -> tokio::task::JoinHandle<()> {
    watch_queue_consumers(link, queue, Duration::from_secs(5), Arc::default())
}

/// As [`watch_queue`], every `every`, also storing in `consumers` (and
/// publishing) how many consumers the broker counts on the queue.
pub fn watch_queue_consumers(
    link: crate::BrokerLink,
    queue: String,
    every: Duration,
    consumers: Arc<AtomicU32>,
) -> tokio::task::JoinHandle<()> {
    use lapin::options::QueueDeclareOptions;
    use lapin::types::FieldTable;
    tokio::spawn(async move {
        let gauge = metrics::gauge!("clarion_amqp_queue_messages", "queue" => queue.clone());
        let consumer_gauge = metrics::gauge!("clarion_amqp_queue_consumers", "queue" => queue.clone());
        loop {
            let connection = link.connection().await;
            if let Ok(channel) = connection.create_channel().await {
                let passive = QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                };
                // A broker that stops answering gets the channel reopened.
                while let Ok(Ok(declared)) = tokio::time::timeout(
                    QUEUE_WATCH_TIMEOUT,
                    channel.queue_declare(queue.as_str().into(), passive, FieldTable::default()),
                )
                .await
                {
                    gauge.set(f64::from(declared.message_count()));
                    consumer_gauge.set(f64::from(declared.consumer_count()));
                    consumers.store(declared.consumer_count(), Ordering::Relaxed);
                    tokio::time::sleep(every).await;
                }
            }
            tokio::time::sleep(every).await;
        }
    })
}

/// Declares a family of series of one kind: its name, help and label
/// names, and how one series of it is picked.
macro_rules! family {
    ($(#[$doc:meta])* $family:ident, $handle:ident, $register:ident, $describe:ident) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $family<const N: usize> {
            pub name: &'static str,
            pub help: &'static str,
            /// The label names; every series gives a value for each.
            pub labels: [&'static str; N],
        }

        impl<const N: usize> $family<N> {
            pub const fn new(name: &'static str, help: &'static str, labels: [&'static str; N]) -> Self {
                Self { name, help, labels }
            }

            /// The series the label `values` pick, in the order of `labels`.
            pub fn with<V: Into<SharedString>>(&self, values: [V; N]) -> metrics::$handle {
                let labels: Vec<Label> = self
                    .labels
                    .iter()
                    .zip(values)
                    .map(|(name, value)| Label::new(*name, value))
                    .collect();
                metrics::$register!(self.name, labels)
            }

            /// Gives the recorder the help text (`# HELP` on `/metrics`).
            pub fn describe(&self) {
                metrics::$describe!(self.name, self.help);
            }
        }

        impl $family<0> {
            /// The one series of a metric without labels.
            pub fn get(&self) -> metrics::$handle {
                metrics::$register!(self.name)
            }
        }
    };
}

family!(
    /// A counter (`_total`): how many times something happened.
    CounterVec,
    Counter,
    counter,
    describe_counter
);
family!(
    /// A gauge: a value that goes up and down.
    GaugeVec,
    Gauge,
    gauge,
    describe_gauge
);
family!(
    /// A histogram (the recorder's buckets, see [`install`]).
    HistogramVec,
    Histogram,
    histogram,
    describe_histogram
);
