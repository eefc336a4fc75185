//! One span and a few metrics per HTTP request. A request carrying
//! `traceparent` continues its caller's trace; otherwise its span is a root.

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use clarion_proto::names::headers;
use clarion_proto::trace_context;
use tracing::Instrument;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::metrics;

pub async fn observe(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    // The route pattern, not the path: a fixed, low-cardinality label.
    let route = request.match_pattern().unwrap_or_else(|| "unmatched".to_owned());
    let method = method_label(request.method());
    let span = tracing::info_span!(
        "HTTP request",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = Empty,
    );
    if request.headers().contains_key(headers::TRACEPARENT) {
        let parent = trace_context::extract(|name| request.headers().get(name).and_then(|v| v.to_str().ok()));
        let _ = span.set_parent(parent);
    }
    let response = next.call(request).instrument(span.clone()).await?;
    let status = response.status().as_u16();
    span.record("http.response.status_code", status);
    metrics::API_REQUESTS
        .with([method.to_owned(), route.clone(), status.to_string()])
        .increment(1);
    metrics::API_REQUEST_DURATION
        .with([route])
        .record(started.elapsed().as_secs_f64());
    Ok(response)
}

/// The request method as a label from a fixed set: a made-up method must
/// not become a new metric series (2,000 of them grew `/metrics` a
/// hundredfold).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "other",
    }
}
