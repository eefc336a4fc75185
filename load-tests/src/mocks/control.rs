//! The control API every mock serves on its own plain-HTTP port:
//!
//! - `GET /stats` — totals, per-status counts, duplicates, latency, and
//!   what the phones behind the mock reported when receipts are on ([`Stats`]);
//! - `POST /lookup` `{"tokens": [...]}` — per-token push counts;
//! - `GET` / `PUT /faults` — the fault settings ([`FaultConfig`]);
//! - `GET /sample` — the body of the last accepted push;
//! - `GET /received` — the last accepted pushes (token, path, headers, body);
//! - `POST /reset` — forget the counts (and pending receipts) and clear the faults.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use serde::Deserialize;
use serde_json::json;

use super::accounting::{Accounting, Stats};
use super::faults::{FaultConfig, Faults};
use super::phones::{Phones, ReceiptStats, ReceiptsConfig};
use super::server::{Listener, empty_response, json_response, serve_plain};

/// Largest control request body (a long list of tokens).
const MAX_BODY: usize = 64 << 20;

#[derive(Deserialize)]
struct LookupRequest {
    tokens: Vec<String>,
}

/// How many accepted pushes the mock keeps for [`MockState::received`].
pub const RECEIVED_KEPT: usize = 256;

/// One accepted push, as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    pub token: String,
    /// The request path (FCM's names the project).
    pub path: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Received {
    /// The body parsed as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }

    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    fn describe(&self) -> serde_json::Value {
        let headers: serde_json::Map<String, serde_json::Value> = self
            .headers
            .iter()
            .filter(|(name, _)| *name != "authorization")
            .map(|(name, value)| (name.to_string(), json!(value.to_str().unwrap_or_default())))
            .collect();
        json!({"token": self.token, "path": self.path, "headers": headers, "body": self.json()})
    }
}

/// What the control API reads and changes.
pub struct MockState {
    pub accounting: Accounting,
    pub faults: Faults,
    /// The last [`RECEIVED_KEPT`] accepted pushes, oldest first.
    received: std::sync::Mutex<std::collections::VecDeque<Received>>,
    /// Whether accepted pushes are kept (tests read them; benchmarks turn
    /// it off: it costs the mock about a tenth of its CPU per push).
    keeping: std::sync::atomic::AtomicBool,
    /// The phones behind the mock, once they report receipts (from the
    /// start, or from [`MockState::start_phones`]).
    phones: std::sync::OnceLock<Phones>,
    /// The mock's runtime, where the phones send from.
    runtime: tokio::runtime::Handle,
}

impl MockState {
    fn new(runtime: tokio::runtime::Handle) -> Self {
        Self {
            accounting: Accounting::new(),
            faults: Faults::new(),
            received: std::sync::Mutex::new(std::collections::VecDeque::with_capacity(RECEIVED_KEPT)),
            keeping: std::sync::atomic::AtomicBool::new(true),
            phones: std::sync::OnceLock::new(),
            runtime,
        }
    }

    /// Switches the phones on: from now on they report the pushes the mock
    /// accepts (the benchmark does this after its ceiling phase, once the
    /// coordinator they report to runs). Refused when they are on already.
    pub fn start_phones(&self, config: ReceiptsConfig) -> anyhow::Result<()> {
        let phones = {
            let _on_the_mock_runtime = self.runtime.enter();
            Phones::start(config)?
        };
        self.phones
            .set(phones)
            .map_err(|_| anyhow::anyhow!("the phones behind this mock report receipts already"))
    }

    /// The mock accepted (answered 200) a push of `notification_id` to
    /// `token`: its phone reports it, when receipts are on.
    pub fn phones_accepted(&self, notification_id: uuid::Uuid, token: &str) {
        if let Some(phones) = self.phones.get() {
            phones.accepted(notification_id, token);
        }
    }

    /// Whether a push accepted for `token` makes its phone report (receipts
    /// on, and the token in the panel when there is one): a mock that opens
    /// only a sample of the pushes opens these too, for their notification id.
    pub fn phones_report(&self, token: &str) -> bool {
        self.phones.get().is_some_and(|phones| phones.report_for(token))
    }

    /// What the phones reported, when receipts are on.
    pub fn receipts(&self) -> Option<ReceiptStats> {
        self.phones.get().map(Phones::stats)
    }

    /// The counters with the phones' receipts.
    pub fn stats(&self) -> Stats {
        Stats {
            receipts: self.receipts(),
            ..self.accounting.stats()
        }
    }

    /// Whether accepted pushes are kept for [`MockState::received`].
    pub fn keeps(&self) -> bool {
        self.keeping.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops (or starts again) keeping accepted pushes.
    pub fn set_keeping(&self, keeping: bool) {
        self.keeping.store(keeping, std::sync::atomic::Ordering::Relaxed);
        if !keeping {
            self.kept().clear();
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<Received>> {
        self.received.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps an accepted push (the oldest kept one goes when full).
    pub fn keep(&self, push: Received) {
        let mut kept = self.kept();
        if kept.len() == RECEIVED_KEPT {
            kept.pop_front();
        }
        kept.push_back(push);
    }

    /// The last accepted pushes, oldest first.
    pub fn received(&self) -> Vec<Received> {
        self.kept().iter().cloned().collect()
    }

    /// The last accepted push to `token`.
    pub fn received_by(&self, token: &str) -> Option<Received> {
        self.kept().iter().rev().find(|push| push.token == token).cloned()
    }

    /// The last accepted push body, parsed.
    pub fn sample(&self) -> Option<serde_json::Value> {
        self.kept().back().map(Received::json)
    }
}

/// Fresh counters and faults, the phones when `receipts` are on, and the
/// control API serving them on `addr`.
pub async fn start(
    addr: SocketAddr,
    receipts: Option<ReceiptsConfig>,
) -> anyhow::Result<(Arc<MockState>, Listener)> {
    let state = Arc::new(MockState::new(tokio::runtime::Handle::current()));
    if let Some(receipts) = receipts {
        state.start_phones(receipts)?;
    }
    let served = state.clone();
    let listener = serve_plain(addr, move |request| handle(served.clone(), request)).await?;
    Ok((state, listener))
}

async fn handle(state: Arc<MockState>, request: Request<Incoming>) -> Response<Bytes> {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    match (method, path.as_str()) {
        (Method::GET, "/stats") => json_response(200, &json!(state.stats())),
        (Method::GET, "/faults") => json_response(200, &json!(state.faults.get())),
        (Method::GET, "/sample") => json_response(200, &json!({"body": state.sample()})),
        (Method::GET, "/received") => {
            let pushes: Vec<_> = state.received().iter().map(Received::describe).collect();
            json_response(200, &json!({"pushes": pushes}))
        }
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
            if let Some(phones) = state.phones.get() {
                phones.reset();
            }
            state.faults.set(FaultConfig::default());
            state.kept().clear();
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
