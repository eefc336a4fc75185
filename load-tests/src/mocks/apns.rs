//! A mock of Apple's APNs provider API (HTTP/2 over TLS only) that checks
//! requests the way Apple does and answers with Apple's statuses and
//! `{"reason": ...}` bodies.
//!
//! `POST /3/device/{token}` needs an ES256 provider token signed by the key
//! the mock wrote as a `.p8` file, with the mock's key id (`kid`) and team id
//! (`iss`) and an `iat` less than an hour old; `apns-topic` (the bundle id),
//! `apns-push-type` (`alert` | `background`; absent means `alert`, as Apple
//! reads it for iOS), `apns-priority` (5 | 10),
//! `apns-expiration` (integer), `apns-collapse-id` (≤ 64 bytes), `apns-id`
//! (a UUID), none of them twice, and a JSON body of at most 4096 bytes
//! holding an `aps` object (with `alert` for alert pushes).
//!
//! Beyond Apple's rules, it holds Clarion to its own contract: every body
//! carries `notification_id` (a UUID) beside `aps`, or the push is refused
//! with 400 `MissingNotificationId` (a reason of the mock's, not Apple's).
//! With receipts on ([`ApnsMockConfig::receipts`]) the phones behind it
//! report the pushes it accepted (see [`super::phones`]).
//!
//! The same listener serves Live Activity channels and broadcasts
//! ([`super::apns_channels`]), behind the same provider-token checks.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use hyper::{Method, Request, Response};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use rcgen::KeyPair;
use serde::Deserialize;
use serde_json::json;

use super::apns_channels::BroadcastChannels;
use super::control::{self, MockState, Received};
use super::faults::{Verdict, impostor_page};
use super::phones::ReceiptsConfig;
use super::server::{ConnectionId, Listener, Protocols, serve_tls};
use super::tls::TestPki;
use super::{unix_ms, unix_s};

/// Largest payload Apple accepts.
pub const MAX_PAYLOAD: usize = 4096;
/// Provider tokens older than this are refused (`ExpiredProviderToken`).
const TOKEN_MAX_AGE_S: u64 = 3600;
/// A provider token `iat` this far in the future is tolerated (clock skew).
const CLOCK_SKEW_S: u64 = 60;
/// The mock's own reason for a body without a UUID `notification_id`
/// (Clarion's contract, not Apple's rule).
pub const MISSING_NOTIFICATION_ID: &str = "MissingNotificationId";
/// A connection may switch provider tokens at most once in this long.
const MIN_TOKEN_UPDATE_INTERVAL: Duration = Duration::from_secs(20 * 60);

/// Where to listen and which credentials to mint.
#[derive(Debug, Clone)]
pub struct ApnsMockConfig {
    pub addr: SocketAddr,
    pub control_addr: SocketAddr,
    /// Where the CA certificate and the `.p8` key are written.
    pub dir: PathBuf,
    pub team_id: String,
    pub key_id: String,
    pub bundle_id: String,
    /// The phones behind the mock post receipts when set.
    pub receipts: Option<ReceiptsConfig>,
}

impl ApnsMockConfig {
    /// Free ports on 127.0.0.1 and test credentials, files under `dir`.
    pub fn local(dir: PathBuf) -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            control_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            dir,
            team_id: "CLARIONTM1".into(),
            key_id: "CLARIONK01".into(),
            bundle_id: "com.clarion.news".into(),
            receipts: None,
        }
    }
}

/// A running mock; stops when dropped.
pub struct ApnsMock {
    /// Base URL of the push API, e.g. `https://127.0.0.1:40001`.
    pub endpoint: String,
    /// Base URL of the control API.
    pub control: String,
    pub ca_file: PathBuf,
    pub key_file: PathBuf,
    pub key_id: String,
    pub team_id: String,
    pub bundle_id: String,
    pub state: Arc<MockState>,
    /// Live Activity channels and the broadcasts each received.
    pub channels: Arc<BroadcastChannels>,
    _push: Listener,
    _control: Listener,
}

impl ApnsMock {
    pub async fn start(config: ApnsMockConfig) -> Result<Self> {
        let pki = TestPki::generate("APNs")?;
        let ca_file = config.dir.join("apns-ca.pem");
        pki.write_ca(&ca_file)?;
        let key = KeyPair::generate().context("generating the provider key")?;
        let key_file = config.dir.join(format!("AuthKey_{}.p8", config.key_id));
        std::fs::write(&key_file, key.serialize_pem())
            .with_context(|| format!("writing {}", key_file.display()))?;

        let (state, control) = control::start(config.control_addr, config.receipts)
            .await
            .context("binding the mock's control API")?;
        let channels = Arc::new(BroadcastChannels::default());
        let apns = Arc::new(Apns {
            channels: channels.clone(),
            state: state.clone(),
            decoding_key: DecodingKey::from_ec_pem(key.public_key_pem().as_bytes())
                .context("loading the provider public key")?,
            key_id: config.key_id.clone(),
            team_id: config.team_id.clone(),
            bundle_id: config.bundle_id.clone(),
            verified: RwLock::new(HashMap::new()),
            connections: Mutex::new(HashMap::new()),
        });
        let push = serve_tls(
            config.addr,
            pki.server_config(Protocols::Http2Only.alpn())?,
            move |request, connection| {
                let apns = apns.clone();
                async move { apns.handle(request, connection).await }
            },
        )
        .await
        .context("binding the APNs mock")?;
        Ok(Self {
            endpoint: format!("https://{}", push.addr),
            control: format!("http://{}", control.addr),
            ca_file,
            key_file,
            key_id: config.key_id,
            team_id: config.team_id,
            bundle_id: config.bundle_id,
            state,
            channels,
            _push: push,
            _control: control,
        })
    }

    /// The dispatcher settings that point at this mock.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("CLARION_APNS_ENDPOINT".into(), self.endpoint.clone()),
            (
                "CLARION_APNS_KEY_FILE".into(),
                self.key_file.display().to_string(),
            ),
            ("CLARION_APNS_KEY_ID".into(), self.key_id.clone()),
            ("CLARION_APNS_TEAM_ID".into(), self.team_id.clone()),
            ("CLARION_APNS_TOPIC".into(), self.bundle_id.clone()),
            // The same listener serves Live Activity channel management.
            ("CLARION_APNS_CHANNELS_ENDPOINT".into(), self.endpoint.clone()),
            (
                "CLARION_APNS_CHANNELS_SANDBOX_ENDPOINT".into(),
                self.endpoint.clone(),
            ),
        ]
    }
}

/// What the mock reads of a push body (the rest is skipped unparsed).
#[derive(Deserialize)]
struct Payload<'a> {
    aps: Option<Aps>,
    /// Kept raw, so a value of the wrong type is Clarion's contract
    /// broken, not an unreadable body.
    #[serde(borrow, default)]
    notification_id: Option<&'a serde_json::value::RawValue>,
}

#[derive(Deserialize)]
struct Aps {
    alert: Option<serde::de::IgnoredAny>,
    event: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct Claims {
    iss: String,
    iat: u64,
}

/// The request headers Apple reads, found in one pass over the request.
struct ApnsHeaders<'a> {
    /// Value of each of [`ApnsHeaders::NAMES`] (`None` when absent or not
    /// visible ASCII).
    values: [Option<&'a str>; 7],
}

impl<'a> ApnsHeaders<'a> {
    const NAMES: [&'static str; 7] = [
        "authorization",
        "apns-topic",
        "apns-push-type",
        "apns-priority",
        "apns-expiration",
        "apns-collapse-id",
        "apns-id",
    ];

    /// Refuses a request that repeats any of them (`DuplicateHeaders`).
    fn read(headers: &'a http::HeaderMap) -> Result<Self, Refusal> {
        let mut values = [None; 7];
        let mut seen = [false; 7];
        for (name, value) in headers {
            let Some(i) = Self::NAMES.iter().position(|known| *known == name.as_str()) else {
                continue;
            };
            if seen[i] {
                return Err(refuse(400, "DuplicateHeaders"));
            }
            seen[i] = true;
            values[i] = value.to_str().ok();
        }
        Ok(Self { values })
    }

    fn get(&self, name: &str) -> Option<&'a str> {
        let i = Self::NAMES.iter().position(|known| *known == name)?;
        self.values[i]
    }
}

/// Which provider token a connection uses, its `iat`, and since when.
struct ConnectionAuth {
    token: String,
    iat: u64,
    changed_at: Instant,
}

struct Apns {
    state: Arc<MockState>,
    channels: Arc<BroadcastChannels>,
    decoding_key: DecodingKey,
    key_id: String,
    team_id: String,
    bundle_id: String,
    /// Provider tokens whose signature was checked, with their `iat`.
    verified: RwLock<HashMap<String, u64>>,
    connections: Mutex<HashMap<ConnectionId, ConnectionAuth>>,
}

/// An answer other than 200.
struct Refusal {
    status: u16,
    reason: &'static str,
    retry_after_s: Option<u64>,
}

fn refuse(status: u16, reason: &'static str) -> Refusal {
    Refusal {
        status,
        reason,
        retry_after_s: None,
    }
}

impl Apns {
    async fn handle(&self, request: Request<Bytes>, connection: ConnectionId) -> Response<Bytes> {
        if BroadcastChannels::serves(request.uri().path()) {
            let latency = self.channels.arrived();
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            return self.handle_channels(request, connection);
        }
        let started = Instant::now();
        let apns_id = request
            .headers()
            .get("apns-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let token = request
            .uri()
            .path()
            .strip_prefix("/3/device/")
            .unwrap_or_default()
            .to_owned();
        let outcome = self.check(request, &token, connection);
        self.state.faults.delay().await;
        if let Some(status) = self.state.faults.impostor_status() {
            self.state.accounting.record(&token, status, started.elapsed());
            return impostor_page(status);
        }
        let status = outcome.as_ref().map_or_else(|refusal| refusal.status, |_| 200);
        self.state.accounting.record(&token, status, started.elapsed());
        if let Ok(notification_id) = &outcome {
            self.state.phones_accepted(*notification_id, &token);
        }
        let apns_id = match apns_id {
            Some(id) if uuid::Uuid::parse_str(&id).is_ok() => id,
            _ => uuid::Uuid::new_v4().to_string(),
        };
        let builder = Response::builder().status(status).header("apns-id", apns_id);
        let response = match outcome {
            Ok(_) => builder.body(Bytes::new()),
            Err(refusal) => {
                let mut body = json!({"reason": refusal.reason});
                if refusal.reason == "Unregistered" {
                    body["timestamp"] = json!(unix_ms());
                }
                let builder = match refusal.retry_after_s {
                    Some(seconds) => builder.header("retry-after", seconds),
                    None => builder,
                };
                builder
                    .header("content-type", "application/json")
                    .body(Bytes::from(body.to_string()))
            }
        };
        response.unwrap_or_else(|_| Response::new(Bytes::new()))
    }

    /// A channel-management or broadcast request: the provider token
    /// checked as for a push, then [`BroadcastChannels`] answers.
    fn handle_channels(&self, request: Request<Bytes>, connection: ConnectionId) -> Response<Bytes> {
        let (parts, body) = request.into_parts();
        let request_id = parts
            .headers
            .get("apns-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|id| uuid::Uuid::parse_str(id).is_ok())
            .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
        let answer = ApnsHeaders::read(&parts.headers)
            .and_then(|headers| self.authenticate(headers.get("authorization"), connection));
        let builder = Response::builder().header("apns-request-id", request_id);
        let response = match answer {
            Err(refusal) => builder
                .status(refusal.status)
                .header("content-type", "application/json")
                .body(Bytes::from(json!({"reason": refusal.reason}).to_string())),
            Ok(()) => {
                let answer = self.channels.handle(
                    &parts.method,
                    parts.uri.path(),
                    &parts.headers,
                    &body,
                    &self.bundle_id,
                );
                answer
                    .headers
                    .into_iter()
                    .fold(builder.status(answer.status), |builder, (name, value)| {
                        builder.header(name, value)
                    })
                    .body(answer.body)
            }
        };
        response.unwrap_or_else(|_| Response::new(Bytes::new()))
    }

    /// The push's notification id when it is accepted.
    fn check(
        &self,
        request: Request<Bytes>,
        token: &str,
        connection: ConnectionId,
    ) -> Result<uuid::Uuid, Refusal> {
        if request.method() != Method::POST {
            return Err(refuse(405, "MethodNotAllowed"));
        }
        if !request.uri().path().starts_with("/3/device/") {
            return Err(refuse(404, "BadPath"));
        }
        if token.is_empty() {
            return Err(refuse(400, "MissingDeviceToken"));
        }
        let (parts, body) = request.into_parts();
        let headers = ApnsHeaders::read(&parts.headers)?;
        self.authenticate(headers.get("authorization"), connection)?;

        // Apple treats a push without the header as an alert (iOS).
        let push_type = match parts.headers.contains_key("apns-push-type") {
            true => headers.get("apns-push-type").unwrap_or_default(),
            false => "alert",
        };
        if !matches!(push_type, "alert" | "background" | "liveactivity") {
            return Err(refuse(400, "InvalidPushType"));
        }
        let live_activity = push_type == "liveactivity";
        match headers.get("apns-topic") {
            None => return Err(refuse(400, "MissingTopic")),
            Some(topic) => {
                let for_app = match topic.strip_suffix(".push-type.liveactivity") {
                    Some(bundle) if live_activity => bundle,
                    _ if live_activity => return Err(refuse(400, "BadTopic")),
                    _ => topic,
                };
                if for_app != self.bundle_id {
                    return Err(refuse(400, "DeviceTokenNotForTopic"));
                }
            }
        }
        match headers.get("apns-priority") {
            None | Some("10") if push_type != "background" => {}
            None | Some("5") => {}
            Some(_) => return Err(refuse(400, "BadPriority")),
        }
        if headers
            .get("apns-expiration")
            .is_some_and(|v| v.parse::<u64>().is_err())
        {
            return Err(refuse(400, "BadExpirationDate"));
        }
        if headers.get("apns-collapse-id").is_some_and(|v| v.len() > 64) {
            return Err(refuse(400, "BadCollapseId"));
        }
        if headers
            .get("apns-id")
            .is_some_and(|v| uuid::Uuid::parse_str(v).is_err())
        {
            return Err(refuse(400, "BadMessageId"));
        }

        if body.len() > MAX_PAYLOAD {
            return Err(refuse(413, "PayloadTooLarge"));
        }
        let payload: Payload = serde_json::from_slice(&body).map_err(|_| refuse(400, "PayloadEmpty"))?;
        match payload.aps {
            Some(aps) if live_activity && aps.event.is_some() => {}
            Some(aps) if !live_activity && (push_type == "background" || aps.alert.is_some()) => {}
            _ => return Err(refuse(400, "PayloadEmpty")),
        }

        if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(refuse(400, "BadDeviceToken"));
        }
        let notification_id = payload
            .notification_id
            .and_then(|raw| serde_json::from_str::<Cow<'_, str>>(raw.get()).ok())
            .and_then(|id| uuid::Uuid::parse_str(&id).ok())
            .ok_or_else(|| refuse(400, MISSING_NOTIFICATION_ID))?;
        match self.state.faults.judge(token) {
            Verdict::Serve => {
                if self.state.keeps() {
                    self.state.keep(Received {
                        token: token.to_owned(),
                        path: parts.uri.path().to_owned(),
                        headers: parts.headers,
                        body,
                    });
                }
                Ok(notification_id)
            }
            Verdict::Dead => Err(refuse(410, "Unregistered")),
            Verdict::Invalid => Err(refuse(400, "BadDeviceToken")),
            Verdict::Foreign => Err(refuse(400, "DeviceTokenNotForTopic")),
            Verdict::Limited { .. } => Err(refuse(429, "TooManyRequests")),
            Verdict::Error(status) => Err(Refusal {
                status,
                reason: match status {
                    429 => "TooManyRequests",
                    500 => "InternalServerError",
                    503 => "ServiceUnavailable",
                    _ => "InternalServerError",
                },
                retry_after_s: (status == 503).then(|| self.state.faults.retry_after_s()),
            }),
        }
    }

    /// Checks the provider token and how often this connection changes it.
    fn authenticate(&self, authorization: Option<&str>, connection: ConnectionId) -> Result<(), Refusal> {
        let jwt = authorization
            .and_then(|value| {
                value
                    .strip_prefix("bearer ")
                    .or_else(|| value.strip_prefix("Bearer "))
            })
            .ok_or_else(|| refuse(403, "MissingProviderToken"))?;
        let mut connections = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        let known = connections
            .get(&connection)
            .filter(|auth| auth.token == jwt)
            .map(|auth| auth.iat);
        let iat = match known {
            Some(iat) => iat,
            None => self.verify(jwt)?,
        };
        let now = unix_s();
        if iat + TOKEN_MAX_AGE_S < now {
            return Err(refuse(403, "ExpiredProviderToken"));
        }
        if iat > now + CLOCK_SKEW_S {
            return Err(refuse(403, "InvalidProviderToken"));
        }
        if known.is_some() {
            return Ok(());
        }
        if let Some(current) = connections.get(&connection)
            && current.changed_at.elapsed() < MIN_TOKEN_UPDATE_INTERVAL
        {
            return Err(refuse(429, "TooManyProviderTokenUpdates"));
        }
        if connections.len() > 10_000 {
            connections.clear();
        }
        connections.insert(
            connection,
            ConnectionAuth {
                token: jwt.to_owned(),
                iat,
                changed_at: Instant::now(),
            },
        );
        Ok(())
    }

    /// The `iat` of a correctly signed provider token (signatures are checked
    /// once per distinct token).
    fn verify(&self, jwt: &str) -> Result<u64, Refusal> {
        if let Some(iat) = self.verified.read().unwrap_or_else(|p| p.into_inner()).get(jwt) {
            return Ok(*iat);
        }
        let invalid = || refuse(403, "InvalidProviderToken");
        let header = jsonwebtoken::decode_header(jwt).map_err(|_| invalid())?;
        if header.alg != Algorithm::ES256 || header.kid.as_deref() != Some(self.key_id.as_str()) {
            return Err(invalid());
        }
        let mut validation = Validation::new(Algorithm::ES256);
        validation.validate_exp = false;
        validation.required_spec_claims = HashSet::from(["iss".to_owned()]);
        validation.set_issuer(&[&self.team_id]);
        let claims = jsonwebtoken::decode::<Claims>(jwt, &self.decoding_key, &validation)
            .map_err(|_| invalid())?
            .claims;
        if claims.iss != self.team_id {
            return Err(invalid());
        }
        let mut verified = self.verified.write().unwrap_or_else(|p| p.into_inner());
        if verified.len() > 10_000 {
            verified.clear();
        }
        verified.insert(jwt.to_owned(), claims.iat);
        Ok(claims.iat)
    }
}
