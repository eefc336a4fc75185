//! An OTLP/HTTP trace receiver for tests: accepts `POST /v1/traces`
//! (protobuf `ExportTraceServiceRequest`), keeps every span with its
//! service, and answers like a collector.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http_body_util::BodyExt;
use hyper::{Method, Response};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;

use crate::mocks::server::{Listener, empty_response, serve_plain};

/// One received span, flattened.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub attributes: HashMap<String, String>,
    pub events: Vec<String>,
}

pub struct OtlpReceiver {
    /// Base URL to give as `CLARION_OTLP_ENDPOINT`.
    pub endpoint: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    _listener: Listener,
}

impl OtlpReceiver {
    pub async fn start() -> Self {
        let spans: Arc<Mutex<Vec<ReceivedSpan>>> = Arc::default();
        let store = spans.clone();
        let listener = serve_plain(SocketAddr::from(([127, 0, 0, 1], 0)), move |request| {
            let store = store.clone();
            async move {
                if request.method() != Method::POST || request.uri().path() != "/v1/traces" {
                    return empty_response(404);
                }
                let Ok(body) = request.into_body().collect().await else {
                    return empty_response(400);
                };
                let Ok(export) = ExportTraceServiceRequest::decode(body.to_bytes()) else {
                    return empty_response(400);
                };
                store
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(flatten(export));
                Response::builder()
                    .status(200)
                    .header("content-type", "application/x-protobuf")
                    .body(bytes::Bytes::new())
                    .unwrap_or_else(|_| empty_response(500))
            }
        })
        .await
        .expect("the OTLP receiver binds");
        Self {
            endpoint: format!("http://{}", listener.addr),
            spans,
            _listener: listener,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

fn flatten(export: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut spans = Vec::new();
    for resource_spans in export.resource_spans {
        let resource = resource_spans
            .resource
            .map(|resource| attributes(&resource.attributes))
            .unwrap_or_default();
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                spans.push(ReceivedSpan {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    attributes: attributes(&span.attributes),
                    events: span.events.into_iter().map(|event| event.name).collect(),
                });
            }
        }
    }
    spans
}

fn attributes(pairs: &[KeyValue]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|pair| {
            let value = match pair.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                Some(AnyValue::DoubleValue(d)) => d.to_string(),
                _ => String::new(),
            };
            (pair.key.clone(), value)
        })
        .collect()
}
