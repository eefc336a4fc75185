//! One push to one subscription (RFC 8030 §5): `POST /push/<id>` with
//! VAPID, `TTL`, `Content-Encoding: aes128gcm` and an encrypted body of at
//! most 4,096 bytes. The mock checks it as a push service does, opens it as
//! the browser would, then answers 201 with a `Location`, or what the
//! faults say: 410 or 404 (the subscription is gone), 403 (another
//! application server's key), 429 and 503 with `Retry-After`, 401, 5xx.
//!
//! Beyond the RFCs, it holds Clarion to its own contract: the decrypted
//! message is JSON carrying the notification's id (a UUID), as
//! `notification_id` or, in the declarative form, as
//! `notification.data.notification_id`; else 400.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use hyper::{Method, Request, Response};
use serde_json::{Value, json};

use super::decrypt::decrypt;
use super::subscriptions::{PUSH_PATH, Subscriptions};
use super::vapid;
use crate::mocks::control::{MockState, Received};
use crate::mocks::faults::{Verdict, impostor_page};
use crate::mocks::server::json_response;

/// Largest encrypted body a push service must accept (RFC 8030 §7.2),
/// and the most the main ones take.
pub const MAX_BODY: usize = 4096;
/// `Urgency` values (RFC 8030 §5.3).
const URGENCIES: [&str; 4] = ["very-low", "low", "normal", "high"];
/// The payload key of Clarion's contract.
const NOTIFICATION_ID: &str = clarion_proto::payload::NOTIFICATION_ID_KEY;

/// A refused push: its status and message.
struct Refusal {
    status: u16,
    message: String,
    retry_after_s: Option<u64>,
}

fn refused(status: u16, message: impl ToString) -> Refusal {
    Refusal {
        status,
        message: message.to_string(),
        retry_after_s: None,
    }
}

/// The push service one mock plays.
pub struct PushService {
    pub state: Arc<MockState>,
    pub subscriptions: Arc<Subscriptions>,
    /// `https://127.0.0.1:<port>`: the `aud` VAPID JWTs must name.
    pub origin: String,
    /// The last `Authorization` that verified (a sender reuses its JWT for
    /// hours): the same header is not verified again until its `exp`.
    pub vapid: vapid::VerifiedCache,
    /// Opens one push in this many (1: every push, as tests want). A
    /// benchmark samples: decrypting is a browser's cost, not the push
    /// service's, and would take the machine the sender is measured on.
    pub decrypt_one_in: AtomicU32,
    /// Well-formed pushes seen, to pick the sample.
    pub seen: AtomicU64,
}

impl PushService {
    pub fn new(state: Arc<MockState>, subscriptions: Arc<Subscriptions>, origin: String) -> Self {
        Self {
            state,
            subscriptions,
            origin,
            vapid: vapid::VerifiedCache::default(),
            decrypt_one_in: AtomicU32::new(1),
            seen: AtomicU64::new(0),
        }
    }

    /// Whether this push is one the sample opens (the phones' own pushes
    /// are opened whatever the sample, for the notification id they report).
    fn opens_this_one(&self) -> bool {
        let one_in = u64::from(self.decrypt_one_in.load(Ordering::Relaxed).max(1));
        self.seen.fetch_add(1, Ordering::Relaxed).is_multiple_of(one_in)
    }
}

impl PushService {
    pub async fn handle(&self, request: Request<Bytes>) -> Response<Bytes> {
        let started = Instant::now();
        let (token, outcome) = self.check(request);
        self.state.faults.delay().await;
        if let Some(status) = self.state.faults.impostor_status() {
            self.state.accounting.record(&token, status, started.elapsed());
            return impostor_page(status);
        }
        let status = outcome.as_ref().map_or_else(|refusal| refusal.status, |_| 201);
        self.state.accounting.record(&token, status, started.elapsed());
        match outcome {
            Ok(notification_id) => {
                if let Some(notification_id) = notification_id {
                    self.state.phones_accepted(notification_id, &token);
                }
                Response::builder()
                    .status(201)
                    .header(
                        http::header::LOCATION,
                        format!("{}/message/{}", self.origin, uuid::Uuid::new_v4().simple()),
                    )
                    .body(Bytes::new())
                    .unwrap_or_else(|_| Response::new(Bytes::new()))
            }
            Err(refusal) => {
                // The shape of Mozilla's autopush errors.
                let mut response = json_response(
                    refusal.status,
                    &json!({"code": refusal.status, "errno": 999, "error": reason(refusal.status),
                            "message": refusal.message}),
                );
                if let Some(seconds) = refusal.retry_after_s {
                    response
                        .headers_mut()
                        .insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
                }
                response
            }
        }
    }

    /// The subscription's id and, when the push is well formed and the
    /// faults let it through, the notification's id from its decrypted
    /// message (which is kept for the tests); `None` for a push outside
    /// the sample, accepted unopened.
    fn check(&self, request: Request<Bytes>) -> (String, Result<Option<uuid::Uuid>, Refusal>) {
        let id = request
            .uri()
            .path()
            .strip_prefix(PUSH_PATH)
            .unwrap_or_default()
            .to_owned();
        if request.method() != Method::POST || id.is_empty() {
            return (id, Err(refused(404, "no such endpoint")));
        }
        let Some(subscription) = self.subscriptions.get(&id) else {
            return (id, Err(refused(404, "unknown subscription")));
        };
        let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
        let vapid = match self.vapid.check(header("authorization"), &self.origin) {
            Ok(vapid) => vapid,
            Err(err) => return (id, Err(refused(401, err))),
        };
        if vapid.public_key != subscription.server_key() {
            return (
                id,
                Err(refused(
                    403,
                    "the VAPID key is not the subscription's applicationServerKey",
                )),
            );
        }
        if header("ttl").is_none_or(|ttl| ttl.parse::<u64>().is_err()) {
            return (id, Err(refused(400, "a TTL header (seconds) is required")));
        }
        if header("content-encoding") != Some("aes128gcm") {
            return (id, Err(refused(415, "Content-Encoding must be aes128gcm")));
        }
        if header("urgency").is_some_and(|urgency| !URGENCIES.contains(&urgency)) {
            return (id, Err(refused(400, "Urgency is not an RFC 8030 value")));
        }
        if header("topic").is_some_and(|topic| !is_topic(topic)) {
            return (id, Err(refused(400, "Topic is over 32 base64url characters")));
        }
        if request.body().len() > MAX_BODY {
            return (id, Err(refused(413, "the message is over 4096 bytes")));
        }
        if !self.opens_this_one() && !self.state.phones_report(&id) {
            return match self.judge(&id) {
                Ok(()) => (id, Ok(None)),
                Err(refusal) => (id, Err(refusal)),
            };
        }
        let plaintext = match decrypt(subscription.keys(), request.body()) {
            Ok(plaintext) => plaintext,
            Err(err) => {
                return (
                    id,
                    Err(refused(400, format!("the message does not decrypt: {err}"))),
                );
            }
        };
        let message: Value = serde_json::from_slice(&plaintext).unwrap_or_default();
        let Some(notification_id) = notification_id(&message) else {
            return (
                id,
                Err(refused(400, "the message carries no notification_id (a UUID)")),
            );
        };
        if let Err(refusal) = self.judge(&id) {
            return (id, Err(refusal));
        }
        if self.state.keeps() {
            let (parts, _) = request.into_parts();
            self.state.keep(Received {
                token: id.clone(),
                path: parts.uri.path().to_owned(),
                headers: parts.headers,
                body: Bytes::from(plaintext),
            });
        }
        (id, Ok(Some(notification_id)))
    }

    /// What the faults say of a well-formed push to `token`.
    fn judge(&self, token: &str) -> Result<(), Refusal> {
        let faults = &self.state.faults;
        match faults.judge(token) {
            Verdict::Serve => Ok(()),
            Verdict::Dead => Err(refused(410, "the subscription has expired")),
            Verdict::Invalid => Err(refused(404, "the subscription is not known")),
            Verdict::Foreign => Err(refused(
                403,
                "the subscription belongs to another application server",
            )),
            Verdict::Limited { retry_after_s } => Err(Refusal {
                retry_after_s: Some(retry_after_s),
                ..refused(429, "too many messages")
            }),
            Verdict::Error(status) => Err(Refusal {
                retry_after_s: matches!(status, 429 | 503).then(|| faults.retry_after_s()),
                ..refused(status, "an injected failure")
            }),
        }
    }
}

/// The notification id of a decrypted message, in either form.
fn notification_id(message: &Value) -> Option<uuid::Uuid> {
    let id = message
        .get(NOTIFICATION_ID)
        .or_else(|| message.pointer(&format!("/notification/data/{NOTIFICATION_ID}")))?;
    uuid::Uuid::parse_str(id.as_str()?).ok()
}

/// RFC 8030 §5.4: at most 32 characters of the base64url alphabet.
fn is_topic(topic: &str) -> bool {
    topic.len() <= 32
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn reason(status: u16) -> &'static str {
    http::StatusCode::from_u16(status)
        .ok()
        .and_then(|status| status.canonical_reason())
        .unwrap_or("Error")
}
