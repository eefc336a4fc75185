//! The APNs mock's broadcast side (iOS 18 Live Activities), as Apple
//! documents it in "Sending channel management requests to APNs" and
//! "Sending broadcast push notification requests to APNs":
//!
//! - channel management (on Apple's own host and port; here the mock's one
//!   listener): `POST /1/apps/{bundle}/channels` with
//!   `{"message-storage-policy": 0 | 1, "push-type": "LiveActivity"}`
//!   answers 201 and the new channel's id (base64) in `apns-channel-id`;
//!   `GET` and `DELETE` of `/1/apps/{bundle}/channels` name the channel in
//!   `apns-channel-id` (200 with the channel's settings, 204);
//!   `GET /1/apps/{bundle}/all-channels` lists them (`{"channels": [...]}`);
//! - broadcasts: `POST /4/broadcasts/apps/{bundle}` with `apns-channel-id`
//!   and `apns-push-type: liveactivity`, a JSON body of at most
//!   [`MAX_BROADCAST_PAYLOAD`] bytes whose `aps` holds `event` (`update` |
//!   `end`), `timestamp` and `content-state`; every accepted one is
//!   recorded under its channel ([`BroadcastChannels::updates`]).
//!
//! Refusals are `{"reason": ...}` with Apple's names: `MissingChannelId`,
//! `BadChannelId` (not base64), `ChannelNotRegistered` (no such channel, or
//! deleted), `BadMessageStoragePolicy`, `InvalidPushType`, `TopicMismatch`
//! (another app's bundle in the path), `PayloadTooLarge`, `PayloadEmpty`,
//! `BadPriority`, `BadExpirationDate`. At [`MAX_CHANNELS`] channels a new
//! one is refused with 429 `TooManyChannels` (Apple's limit per app and
//! environment; the reason is the mock's name for it). The caller checks
//! the provider token first.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use hyper::Method;
use serde_json::{Value, json};

/// Largest broadcast payload accepted, in bytes (a Live Activity's limit).
pub const MAX_BROADCAST_PAYLOAD: usize = 4096;
/// Apple's limit of channels per app and environment.
pub const MAX_CHANNELS: usize = 10_000;
/// Updates kept per channel (the oldest are forgotten past it).
const MAX_UPDATES_KEPT: usize = 1_000;

/// A channel as created.
#[derive(Debug, Clone)]
struct Channel {
    storage_policy: u64,
    updates: Vec<Value>,
}

/// An answer: status, extra headers, body.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Bytes,
}

fn refuse(status: u16, reason: &str) -> Answer {
    Answer {
        status,
        headers: vec![("content-type", "application/json".into())],
        body: Bytes::from(json!({"reason": reason}).to_string()),
    }
}

/// An answer a test asked for in place of the real one.
#[derive(Debug, Clone)]
struct Scripted {
    status: u16,
    reason: &'static str,
    retry_after_s: Option<u64>,
}

/// The channels of the mock's one app, and what each received.
#[derive(Default)]
pub struct BroadcastChannels {
    channels: Mutex<HashMap<String, Channel>>,
    /// Channels deleted (kept so a test can tell deleted from unknown).
    deleted: Mutex<Vec<String>>,
    /// Answers for the next requests, oldest first.
    scripted: Mutex<VecDeque<Scripted>>,
    /// Added to every answer.
    latency: Mutex<Duration>,
    /// Requests that arrived (answered or not yet).
    requests: AtomicU64,
}

impl BroadcastChannels {
    /// Whether `path` is one of the broadcast side's.
    pub fn serves(path: &str) -> bool {
        path.starts_with("/1/apps/") || path.starts_with("/4/broadcasts/apps/")
    }

    /// Answers the next `count` requests with `status` and Apple's
    /// `{"reason": reason}` (and `Retry-After` when given) instead of
    /// serving them.
    pub fn fail_next(&self, count: usize, status: u16, reason: &'static str, retry_after_s: Option<u64>) {
        let mut scripted = self.scripted.lock().unwrap_or_else(|p| p.into_inner());
        scripted.extend(std::iter::repeat_n(
            Scripted {
                status,
                reason,
                retry_after_s,
            },
            count,
        ));
    }

    /// Delays every answer from now on by `latency`.
    pub fn set_latency(&self, latency: Duration) {
        *self.latency.lock().unwrap_or_else(|p| p.into_inner()) = latency;
    }

    /// The delay to add to an answer; counts the request as arrived.
    pub fn arrived(&self) -> Duration {
        self.requests.fetch_add(1, Ordering::Relaxed);
        *self.latency.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests that arrived so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Answers an authenticated request to one of [`Self::serves`]' paths.
    pub fn handle(
        &self,
        method: &Method,
        path: &str,
        headers: &http::HeaderMap,
        body: &Bytes,
        bundle_id: &str,
    ) -> Answer {
        let scripted = self
            .scripted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front();
        if let Some(fault) = scripted {
            let mut answer = refuse(fault.status, fault.reason);
            if let Some(seconds) = fault.retry_after_s {
                answer.headers.push(("retry-after", seconds.to_string()));
            }
            return answer;
        }
        let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
        if let Some(rest) = path.strip_prefix("/4/broadcasts/apps/") {
            if method != Method::POST {
                return refuse(405, "MethodNotAllowed");
            }
            if rest != bundle_id {
                return refuse(400, "TopicMismatch");
            }
            return self.broadcast(header("apns-channel-id"), headers, body);
        }
        let Some(rest) = path.strip_prefix("/1/apps/") else {
            return refuse(404, "BadPath");
        };
        let (bundle, resource) = rest.split_once('/').unwrap_or((rest, ""));
        if bundle != bundle_id {
            return refuse(400, "TopicMismatch");
        }
        match (resource, method) {
            ("channels", &Method::POST) => self.create(body),
            ("channels", &Method::GET) => self.read(header("apns-channel-id")),
            ("channels", &Method::DELETE) => self.delete(header("apns-channel-id")),
            ("all-channels", &Method::GET) => self.list(),
            ("channels" | "all-channels", _) => refuse(405, "MethodNotAllowed"),
            _ => refuse(404, "BadPath"),
        }
    }

    fn create(&self, body: &Bytes) -> Answer {
        let Ok(request) = serde_json::from_slice::<Value>(body) else {
            return refuse(400, "BadRequest");
        };
        if request["push-type"] != "LiveActivity" {
            return refuse(400, "InvalidPushType");
        }
        let storage_policy = match request["message-storage-policy"].as_u64() {
            Some(policy @ (0 | 1)) => policy,
            _ => return refuse(400, "BadMessageStoragePolicy"),
        };
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if channels.len() >= MAX_CHANNELS {
            return refuse(429, "TooManyChannels");
        }
        let id = STANDARD.encode(uuid::Uuid::new_v4().as_bytes());
        channels.insert(
            id.clone(),
            Channel {
                storage_policy,
                updates: Vec::new(),
            },
        );
        Answer {
            status: 201,
            headers: vec![("apns-channel-id", id)],
            body: Bytes::new(),
        }
    }

    /// The channel named by `apns-channel-id`, checked.
    fn checked_id<'a>(&self, id: Option<&'a str>) -> Result<&'a str, Answer> {
        let id = id.ok_or_else(|| refuse(400, "MissingChannelId"))?;
        match STANDARD.decode(id) {
            Ok(bytes) if !bytes.is_empty() => Ok(id),
            _ => Err(refuse(400, "BadChannelId")),
        }
    }

    fn read(&self, id: Option<&str>) -> Answer {
        let id = match self.checked_id(id) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        let channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        match channels.get(id) {
            None => refuse(404, "ChannelNotRegistered"),
            Some(channel) => Answer {
                status: 200,
                headers: vec![("content-type", "application/json".into())],
                body: Bytes::from(
                    json!({"message-storage-policy": channel.storage_policy, "push-type": "LiveActivity"})
                        .to_string(),
                ),
            },
        }
    }

    fn delete(&self, id: Option<&str>) -> Answer {
        let id = match self.checked_id(id) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        let removed = self.channels.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        match removed {
            None => refuse(404, "ChannelNotRegistered"),
            Some(_) => {
                let mut deleted = self.deleted.lock().unwrap_or_else(|p| p.into_inner());
                if deleted.len() < MAX_CHANNELS {
                    deleted.push(id.to_owned());
                }
                Answer {
                    status: 204,
                    headers: Vec::new(),
                    body: Bytes::new(),
                }
            }
        }
    }

    fn list(&self) -> Answer {
        let channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        let ids: Vec<&String> = channels.keys().collect();
        Answer {
            status: 200,
            headers: vec![("content-type", "application/json".into())],
            body: Bytes::from(json!({"channels": ids}).to_string()),
        }
    }

    fn broadcast(&self, id: Option<&str>, headers: &http::HeaderMap, body: &Bytes) -> Answer {
        let id = match self.checked_id(id) {
            Ok(id) => id,
            Err(refusal) => return refusal,
        };
        let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
        if header("apns-push-type") != Some("liveactivity") {
            return refuse(400, "InvalidPushType");
        }
        if !matches!(header("apns-priority"), None | Some("1" | "5" | "10")) {
            return refuse(400, "BadPriority");
        }
        if header("apns-expiration").is_some_and(|v| v.parse::<u64>().is_err()) {
            return refuse(400, "BadExpirationDate");
        }
        if body.len() > MAX_BROADCAST_PAYLOAD {
            return refuse(413, "PayloadTooLarge");
        }
        let Ok(payload) = serde_json::from_slice::<Value>(body) else {
            return refuse(400, "PayloadEmpty");
        };
        let aps = &payload["aps"];
        let well_formed = matches!(aps["event"].as_str(), Some("update" | "end"))
            && aps["timestamp"].is_u64()
            && aps["content-state"].is_object();
        if !well_formed {
            return refuse(400, "PayloadEmpty");
        }
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        let Some(channel) = channels.get_mut(id) else {
            return refuse(404, "ChannelNotRegistered");
        };
        if channel.updates.len() >= MAX_UPDATES_KEPT {
            channel.updates.remove(0);
        }
        channel.updates.push(payload);
        Answer {
            status: 200,
            headers: vec![("apns-unique-id", uuid::Uuid::new_v4().to_string())],
            body: Bytes::new(),
        }
    }

    /// The payloads channel `id` accepted, oldest first (`None`: no such
    /// channel, or deleted).
    pub fn updates(&self, id: &str) -> Option<Vec<Value>> {
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .map(|channel| channel.updates.clone())
    }

    /// The `message-storage-policy` channel `id` was created with (`None`:
    /// no such channel, or deleted).
    pub fn storage_policy(&self, id: &str) -> Option<u64> {
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .map(|channel| channel.storage_policy)
    }

    /// The channels that exist now.
    pub fn channel_ids(&self) -> Vec<String> {
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// The channels deleted so far, in order.
    pub fn deleted(&self) -> Vec<String> {
        self.deleted.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
