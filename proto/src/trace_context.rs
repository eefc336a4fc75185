//! W3C trace context (`traceparent`, `tracestate`) carried in message
//! headers, so the spans of every process that touches a notification join
//! one trace. Uses the process-wide propagator the services install.

use std::collections::HashMap;

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector};

/// The trace headers of `context`, ready to put on a message.
pub fn inject(context: &Context) -> Vec<(String, String)> {
    let mut carrier = Carrier::default();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(context, &mut carrier)
    });
    carrier.0.into_iter().collect()
}

/// The context a message's trace headers describe (empty when absent).
pub fn extract<'a>(header: impl Fn(&str) -> Option<&'a str>) -> Context {
    let mut carrier = Carrier::default();
    for name in crate::names::TRACE_HEADERS {
        if let Some(value) = header(name) {
            carrier.0.insert(name.to_owned(), value.to_owned());
        }
    }
    opentelemetry::global::get_text_map_propagator(|propagator| propagator.extract(&carrier))
}

#[derive(Default)]
struct Carrier(HashMap<String, String>);

impl Injector for Carrier {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

impl Extractor for Carrier {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}
