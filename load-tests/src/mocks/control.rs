//! The control API every mock serves on its own plain-HTTP port:
//!
//! - `GET /stats` — totals, per-status counts, duplicates, latency ([`Stats`]);
//! - `POST /lookup` `{"tokens": [...]}` — per-token push counts;
//! - `GET` / `PUT /faults` — the fault settings ([`FaultConfig`]);
//! - `GET /sample` — the body of a recently accepted push;
//! - `POST /reset` — forget the counts and clear the faults.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use serde::Deserialize;
use serde_json::json;

use super::accounting::Accounting;
use super::faults::{FaultConfig, Faults};
use super::server::{Listener, empty_response, json_response, serve_plain};

/// Largest control request body (a long list of tokens).
const MAX_BODY: usize = 64 << 20;

#[derive(Deserialize)]
struct LookupRequest {
    tokens: Vec<String>,
}

/// What the control API reads and changes.
pub struct MockState {
    pub accounting: Accounting,
    pub faults: Faults,
    /// The body of a recently accepted push, to check what was sent.
    sample: std::sync::Mutex<Option<bytes::Bytes>>,
}

impl MockState {
    fn new() -> Self {
        Self {
            accounting: Accounting::new(),
            faults: Faults::new(),
            sample: std::sync::Mutex::new(None),
        }
    }

    /// Keeps `body` as the sample (skipped when another request holds the
    /// slot: the sample is any recent body, not every one).
    pub fn keep_sample(&self, body: &bytes::Bytes) {
        if let Ok(mut sample) = self.sample.try_lock() {
            *sample = Some(body.clone());
        }
    }

    /// A recently accepted push body, parsed.
    pub fn sample(&self) -> Option<serde_json::Value> {
        let sample = self.sample.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        serde_json::from_slice(&sample).ok()
    }
}

/// Fresh counters and faults, and the control API serving them on `addr`.
pub async fn start(addr: SocketAddr) -> std::io::Result<(Arc<MockState>, Listener)> {
    let state = Arc::new(MockState::new());
    let served = state.clone();
    let listener = serve_plain(addr, move |request| handle(served.clone(), request)).await?;
    Ok((state, listener))
}

async fn handle(state: Arc<MockState>, request: Request<Incoming>) -> Response<Bytes> {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    match (method, path.as_str()) {
        (Method::GET, "/stats") => json_response(200, &json!(state.accounting.stats())),
        (Method::GET, "/faults") => json_response(200, &json!(state.faults.get())),
        (Method::GET, "/sample") => json_response(200, &json!({"body": state.sample()})),
        (Method::PUT, "/faults") => match read_json::<FaultConfig>(request).await {
            Ok(config) => {
                state.faults.set(config);
                empty_response(204)
            }
            Err(message) => json_response(400, &json!({"error": message})),
        },
        (Method::POST, "/lookup") => match read_json::<LookupRequest>(request).await {
            Ok(lookup) => json_response(200, &json!({"counts": state.accounting.lookup(&lookup.tokens)})),
            Err(message) => json_response(400, &json!({"error": message})),
        },
        (Method::POST, "/reset") => {
            state.accounting.reset();
            state.faults.set(FaultConfig::default());
            empty_response(204)
        }
        _ => json_response(404, &json!({"error": format!("no control endpoint {path}")})),
    }
}

async fn read_json<T: serde::de::DeserializeOwned>(request: Request<Incoming>) -> Result<T, String> {
    let body = http_body_util::Limited::new(request.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|err| format!("unreadable body: {err}"))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|err| format!("invalid JSON: {err}"))
}
