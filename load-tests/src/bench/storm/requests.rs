//! The request each load sends for its n-th slot: which token, which
//! body, which key. Everything a request needs is prepared before a phase
//! starts (token pools, keys), so building one costs a format and a copy.

use std::sync::{Arc, Mutex};

use anyhow::Result;
use bytes::Bytes;
use clarion_proto::Platform;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, IF_NONE_MATCH};
use http::{HeaderValue, Method, Request};
use http_body_util::Full;
use serde_json::json;

use super::connection::Answer;
use super::load::Load;
use super::schedule::spread;
use super::tokens::TokenPools;
use crate::local_cluster::{APP_KEY, DESK_KEY};

/// Topics of the new tokens: none of them is the send's, so the writes
/// never change its audience (and the benchmark deletes them afterwards).
pub const NEW_TOPICS: [&str; 2] = ["storm/new-a", "storm/new-b"];
/// A changed token keeps the seeded topic and swaps its second topic
/// between these on each pass, so every write changes something.
pub const CHANGED_TOPICS: [&str; 2] = ["storm/changed-a", "storm/changed-b"];

/// Builds the requests of one load in one phase.
pub struct Requests {
    load: Load,
    host: HeaderValue,
    app_key: HeaderValue,
    desk_key: HeaderValue,
    pools: Arc<TokenPools>,
    /// The notification receipts and polls are about.
    notification_id: String,
    /// 64 hex digits less the slot's 16: new tokens are this and the slot.
    new_prefix: String,
    receipts_per_request: usize,
    /// Each poller's last ETag of the status and of the curve.
    etags: Vec<Mutex<Option<HeaderValue>>>,
    pollers: usize,
    seeded_topic: String,
}

/// What a phase's requests are about.
pub struct Subject<'a> {
    pub addr: &'a str,
    pub notification_id: &'a str,
    /// Distinguishes this run's new tokens from any earlier run's.
    pub run_tag: u64,
    pub receipts_per_request: usize,
    pub pollers: usize,
    pub seeded_topic: &'a str,
}

impl Requests {
    pub fn new(load: Load, subject: &Subject<'_>, pools: Arc<TokenPools>) -> Result<Self> {
        let pollers = subject.pollers.max(1);
        Ok(Self {
            load,
            host: HeaderValue::from_str(subject.addr)?,
            app_key: HeaderValue::from_str(&format!("Bearer {APP_KEY}"))?,
            desk_key: HeaderValue::from_str(&format!("Bearer {DESK_KEY}"))?,
            pools,
            notification_id: subject.notification_id.to_owned(),
            new_prefix: format!("{:016x}{:032x}", subject.run_tag, load as u64),
            receipts_per_request: match load {
                Load::ReceiptsBatched => subject.receipts_per_request.max(1),
                _ => 1,
            },
            etags: (0..2 * pollers).map(|_| Mutex::new(None)).collect(),
            pollers,
            seeded_topic: subject.seeded_topic.to_owned(),
        })
    }

    /// Items one request carries (receipts in a batch; else 1).
    pub fn items(&self) -> u64 {
        self.receipts_per_request as u64
    }

    /// The request of `slot`.
    pub fn request(&self, slot: u64) -> Result<Request<Full<Bytes>>> {
        let (method, path, body, key) = match self.load {
            Load::RegistrationWrites => {
                let (path, body) = self.registration_write(slot);
                (Method::PUT, path, Some(body), &self.app_key)
            }
            Load::RegistrationReads => {
                let reads = &self.pools.reads;
                let token = reads.get(spread(slot, reads.len())).map_or("", String::as_str);
                (
                    Method::GET,
                    format!("/api/v1/registrations/{token}"),
                    None,
                    &self.app_key,
                )
            }
            Load::ReceiptsBatched | Load::ReceiptsSingle => {
                let first = slot * self.receipts_per_request as u64;
                let body = self.receipts(first, self.receipts_per_request);
                (
                    Method::POST,
                    "/api/v1/receipts".to_owned(),
                    Some(body),
                    &self.app_key,
                )
            }
            Load::Pollers => {
                let path = match slot % 2 {
                    0 => format!("/api/v1/notifications/{}", self.notification_id),
                    _ => format!("/api/v1/notifications/{}/curve", self.notification_id),
                };
                (Method::GET, path, None, &self.desk_key)
            }
            Load::Healthz => (Method::GET, "/healthz".to_owned(), None, &self.desk_key),
        };
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.host.clone())
            .header(AUTHORIZATION, key.clone());
        if self.load == Load::Pollers
            && let Ok(etag) = self.etag_of(slot).lock()
            && let Some(etag) = etag.as_ref()
        {
            request = request.header(IF_NONE_MATCH, etag.clone());
        }
        let body = match body {
            Some(body) => {
                request = request.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                Bytes::from(body)
            }
            None => Bytes::new(),
        };
        Ok(request.body(Full::new(body))?)
    }

    /// Keeps what the answer of `slot` tells the next request (a poller's ETag).
    pub fn answered(&self, slot: u64, answer: &Answer) {
        if self.load == Load::Pollers
            && answer.status == 200
            && let Ok(mut etag) = self.etag_of(slot).lock()
        {
            *etag = answer.etag.clone();
        }
    }

    /// The ETag slot of the poller and resource (status or curve) of `slot`.
    fn etag_of(&self, slot: u64) -> &Mutex<Option<HeaderValue>> {
        let poller = (slot / 2) as usize % self.pollers;
        &self.etags[2 * poller + (slot % 2) as usize]
    }

    /// Even slots register a new token, odd ones change a seeded token's
    /// topics (all new when no seeded token is outside the send's audience).
    fn registration_write(&self, slot: u64) -> (String, Vec<u8>) {
        let changed = &self.pools.changed;
        if slot % 2 == 1 && !changed.is_empty() {
            let turn = (slot / 2) as usize;
            let (token, platform) = &changed[turn % changed.len()];
            let second = CHANGED_TOPICS[(turn / changed.len()) % 2];
            let body = json!({"platform": platform.as_str(), "topics": [self.seeded_topic, second]});
            return (
                format!("/api/v1/registrations/{token}"),
                body.to_string().into_bytes(),
            );
        }
        let token = format!("{}{slot:016x}", self.new_prefix);
        let body = json!({"platform": Platform::Ios.as_str(), "topics": NEW_TOPICS});
        (
            format!("/api/v1/registrations/{token}"),
            body.to_string().into_bytes(),
        )
    }

    /// `count` receipts from the `first`-th on: the pool's tokens in turn,
    /// `received` on the first pass over the pool, `opened` on the second,
    /// replays (duplicates) after.
    fn receipts(&self, first: u64, count: usize) -> Vec<u8> {
        let tokens = &self.pools.receipts;
        let len = tokens.len().max(1) as u64;
        let receipts: Vec<_> = (first..first + count as u64)
            .map(|k| {
                let token = tokens.get((k % len) as usize).map_or("", String::as_str);
                let event = if (k / len).is_multiple_of(2) {
                    "received"
                } else {
                    "opened"
                };
                json!({"notification_id": self.notification_id, "token": token, "event": event})
            })
            .collect();
        json!({ "receipts": receipts }).to_string().into_bytes()
    }
}
