//! Logs and traces.
//!
//! Logs go to stdout as text or JSON lines. When `CLARION_OTLP_ENDPOINT` is
//! set, spans are also exported with OTLP/HTTP (to `<endpoint>/v1/traces`,
//! e.g. Jaeger's port 4318) by a batch processor on its own thread: the
//! send path only ever hands a finished span to a bounded queue, never
//! waits for the collector. When the queue is full the span is dropped and
//! counted (`clarion_telemetry_spans_dropped_total`), so a dead or hanging
//! collector costs memory bounded by `CLARION_OTLP_QUEUE_SIZE` and nothing
//! else.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use clap::Args;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor,
};
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, fmt};

use crate::settings::{LogFormat, LogSettings};

/// Where spans go.
#[derive(Debug, Clone, Args)]
pub struct OtlpSettings {
    /// Base URL of an OTLP/HTTP collector (Jaeger: `http://jaeger:4318`);
    /// `/v1/traces` is appended. Trace export is off when unset.
    #[arg(
        id = "otlp_endpoint",
        value_name = "URL",
        long = "otlp-endpoint",
        env = "CLARION_OTLP_ENDPOINT"
    )]
    pub endpoint: Option<String>,

    /// Finished spans waiting for export, at most; more are dropped and counted.
    #[arg(
        id = "otlp_queue_size",
        value_name = "SPANS",
        long = "otlp-queue-size",
        env = "CLARION_OTLP_QUEUE_SIZE",
        default_value_t = 4096,
        value_parser = clap::value_parser!(u32).range(16..=1_000_000)
    )]
    pub queue_size: u32,

    /// Seconds one export may take before it is abandoned.
    #[arg(
        id = "otlp_timeout_secs",
        value_name = "SECONDS",
        long = "otlp-timeout-secs",
        env = "CLARION_OTLP_TIMEOUT_SECS",
        default_value_t = 5
    )]
    pub timeout_secs: u64,
}

/// One service whose spans are exported under its own `service.name`: the
/// spans whose target starts with `target` (its crate name).
#[derive(Debug, Clone)]
pub struct TraceService {
    pub name: &'static str,
    pub target: &'static str,
    /// Extra resource attributes (the dispatcher's platform).
    pub attributes: Vec<KeyValue>,
}

/// Keeps exporting until dropped or shut down.
pub struct Telemetry {
    providers: Vec<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports every finished span now (waits for the export).
    pub fn flush(&self) {
        for provider in &self.providers {
            let _ = provider.force_flush();
        }
    }

    /// Exports what is queued (bounded by the export timeout) and stops.
    pub fn shutdown(self) {
        for provider in &self.providers {
            let _ = provider.shutdown();
        }
    }
}

/// Installs the global subscriber (logs, and spans when an endpoint is set)
/// and the W3C trace-context propagator. Call once per process.
pub fn init(
    log: &LogSettings,
    otlp: &OtlpSettings,
    services: Vec<TraceService>,
) -> Result<Telemetry, String> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let filter = EnvFilter::try_new(&log.filter)
        .map_err(|err| format!("invalid log filter {:?}: {err}", log.filter))?;
    // The log filter applies to logs only: spans are exported whatever the
    // log level (each service's from INFO up).
    let logs = match log.format {
        LogFormat::Text => fmt::layer()
            .with_target(true)
            .with_ansi(std::io::stdout().is_terminal())
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_filter(filter)
            .boxed(),
    };
    let mut providers = Vec::new();
    let mut exports = Vec::new();
    if let Some(endpoint) = &otlp.endpoint {
        for service in services {
            let provider = tracer_provider(endpoint, otlp, &service)?;
            let tracer = provider.tracer(service.name);
            let only_this_service = Targets::new().with_target(service.target, Level::INFO);
            exports.push(
                tracing_opentelemetry::layer()
                    .with_tracer(tracer)
                    .with_filter(only_this_service)
                    .boxed(),
            );
            providers.push(provider);
        }
    }
    // An empty `Vec` of layers hints "no level at all", which would switch
    // every log line off too: no export layers means no layer, not an empty one.
    let exports = (!exports.is_empty()).then_some(exports);
    tracing_subscriber::registry()
        .with(logs)
        .with(exports)
        .try_init()
        .map_err(|err| format!("cannot install the logger: {err}"))?;
    Ok(Telemetry { providers })
}

/// Logs only (tools and tests that export no spans).
pub fn init_logging(settings: &LogSettings) -> Result<(), String> {
    let otlp = OtlpSettings {
        endpoint: None,
        queue_size: 0,
        timeout_secs: 0,
    };
    init(settings, &otlp, Vec::new()).map(|_| ())
}

fn tracer_provider(
    endpoint: &str,
    otlp: &OtlpSettings,
    service: &TraceService,
) -> Result<SdkTracerProvider, String> {
    let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let timeout = Duration::from_secs(otlp.timeout_secs.max(1));
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(url)
        .with_timeout(timeout)
        .build()
        .map_err(|err| format!("cannot build the OTLP exporter: {err}"))?;
    let queued = Arc::new(AtomicUsize::new(0));
    let limit = otlp.queue_size as usize;
    let batch = BatchSpanProcessor::builder(CountingExporter {
        inner: exporter,
        queued: queued.clone(),
    })
    .with_batch_config(
        BatchConfigBuilder::default()
            // Never reached: `BoundedQueue` admits at most `limit` spans.
            .with_max_queue_size(limit * 2)
            .with_max_export_batch_size(512.min(limit))
            .with_scheduled_delay(Duration::from_millis(500))
            .build(),
    )
    .build();
    let mut attributes = vec![
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("service.instance.id", instance_id()),
    ];
    attributes.extend(service.attributes.iter().cloned());
    let resource = Resource::builder()
        .with_service_name(service.name)
        .with_attributes(attributes)
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(BoundedQueue {
            inner: batch,
            queued,
            limit,
        })
        .with_resource(resource)
        .build())
}

/// `hostname-pid`, unique per process.
fn instance_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    format!("{}-{}", host.trim(), std::process::id())
}

/// Admits at most `limit` spans awaiting export; drops (and counts) the rest.
#[derive(Debug)]
struct BoundedQueue {
    inner: BatchSpanProcessor,
    queued: Arc<AtomicUsize>,
    limit: usize,
}

impl SpanProcessor for BoundedQueue {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        let admitted = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok();
        if admitted {
            self.inner.on_end(span);
        } else {
            metrics::counter!("clarion_telemetry_spans_dropped_total").increment(1);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Counts spans out of the queue as they are exported (or fail to be).
#[derive(Debug)]
struct CountingExporter<E> {
    inner: E,
    queued: Arc<AtomicUsize>,
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        self.queued
            .fetch_sub(spans.min(self.queued.load(Ordering::Acquire)), Ordering::AcqRel);
        let outcome = if result.is_ok() { "exported" } else { "failed" };
        metrics::counter!("clarion_telemetry_spans_total", "outcome" => outcome).increment(spans as u64);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
