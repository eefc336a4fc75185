//! A mock of Firebase Cloud Messaging's HTTP v1 API and of Google's OAuth2
//! token endpoint, answering with Google's statuses and error bodies.
//!
//! - Token endpoint (its own listener, HTTP/1.1 or HTTP/2 over TLS):
//!   `POST /token` with `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`
//!   and an RS256 `assertion` signed by the service account the mock wrote
//!   (`iss` = its `client_email`, `aud` = its `token_uri`, `scope` with
//!   `https://www.googleapis.com/auth/firebase.messaging`, at most an hour
//!   long); answers `{"access_token", "expires_in", "token_type"}`.
//! - Send endpoint (HTTP/2 over TLS only):
//!   `POST /v1/projects/{project}/messages:send` with a bearer token issued
//!   above and a v1 message (`message.token`, `notification`,
//!   `android.priority`, `android.ttl` as `"3600s"`, `android.collapse_key`,
//!   `android.notification` (`sound`, `click_action`, `channel_id`,
//!   `notification_count`, `notification_priority`), `data` with string
//!   values); answers `{"name": ...}` or Google's error
//!   JSON with `error.details[].errorCode`.
//!
//! Beyond Google's rules, it holds Clarion to its own contract: every
//! message carries `data.notification_id` (a UUID), or it is refused with
//! 400 `INVALID_ARGUMENT` naming that field. With receipts on
//! ([`FcmMockConfig::receipts`]) the phones behind it report the messages
//! it accepted (see [`super::phones`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use hyper::{Method, Request, Response};
use jsonwebtoken::{Algorithm, DecodingKey};
use rcgen::{KeyPair, PKCS_RSA_SHA256};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::control::{self, MockState, Received};
use super::faults::{Verdict, impostor_page};
use super::phones::ReceiptsConfig;
use super::server::{Listener, MAX_REQUEST_BODY, Protocols, json_response, serve_tls};
use super::tls::TestPki;
use super::{unix_ms, unix_s};

pub const FCM_SCOPE: &str = "https://www.googleapis.com/auth/firebase.messaging";
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// Largest message payload (notification + data), as FCM enforces.
const MAX_PAYLOAD: usize = 4000;
/// Longest assertion lifetime Google accepts.
const MAX_ASSERTION_LIFETIME_S: u64 = 3600;
const CLOCK_SKEW_S: u64 = 60;
/// The `data` key every Clarion message carries.
const NOTIFICATION_ID: &str = clarion_proto::payload::NOTIFICATION_ID_KEY;
/// The mock's refusal of a message without a UUID `data.notification_id`
/// (Clarion's contract, not Google's rule).
pub const MISSING_NOTIFICATION_ID: &str = "Invalid value at 'message.data.notification_id': a Clarion message carries its notification's id (a UUID)";

#[derive(Debug, Clone)]
pub struct FcmMockConfig {
    pub addr: SocketAddr,
    pub token_addr: SocketAddr,
    pub control_addr: SocketAddr,
    /// Where the CA certificate and the service-account JSON are written.
    pub dir: PathBuf,
    pub project_id: String,
    /// Lifetime of issued access tokens.
    pub token_lifetime: Duration,
    /// Where clients reach the token endpoint when that is not
    /// `token_addr` (a proxy in front of it): the token URI written into
    /// the service account, and the audience assertions must name.
    pub public_token_addr: Option<SocketAddr>,
    /// The phones behind the mock post receipts when set.
    pub receipts: Option<ReceiptsConfig>,
}

impl FcmMockConfig {
    pub fn local(dir: PathBuf) -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            token_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            control_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            dir,
            project_id: "clarion-news".into(),
            token_lifetime: Duration::from_secs(3600),
            public_token_addr: None,
            receipts: None,
        }
    }
}

/// A running mock; stops when dropped.
pub struct FcmMock {
    /// Base URL of the send API.
    pub endpoint: String,
    /// The OAuth2 token URI written into the service account.
    pub token_uri: String,
    pub control: String,
    pub ca_file: PathBuf,
    pub credentials_file: PathBuf,
    pub project_id: String,
    pub client_email: String,
    pub state: Arc<MockState>,
    oauth: Arc<OAuth>,
    _send: Listener,
    _token: Listener,
    _control: Listener,
}

impl FcmMock {
    pub async fn start(config: FcmMockConfig) -> Result<Self> {
        let pki = TestPki::generate("FCM")?;
        let ca_file = config.dir.join("fcm-ca.pem");
        pki.write_ca(&ca_file)?;
        let key = KeyPair::generate_for(&PKCS_RSA_SHA256).context("generating the service-account key")?;
        let client_email = format!("clarion-mock@{}.iam.gserviceaccount.com", config.project_id);

        let (state, control) = control::start(config.control_addr, config.receipts)
            .await
            .context("binding the mock's control API")?;
        let token_listener = {
            // Bind first: the token URI names the port.
            let probe = std::net::TcpListener::bind(config.token_addr)?;
            let addr = probe.local_addr()?;
            drop(probe);
            addr
        };
        let public_token_addr = config.public_token_addr.unwrap_or(token_listener);
        let token_uri = format!("https://{public_token_addr}/token");
        let oauth = Arc::new(OAuth {
            decoding_key: DecodingKey::from_rsa_pem(key.public_key_pem().as_bytes())
                .context("loading the service-account public key")?,
            client_email: client_email.clone(),
            token_uri: token_uri.clone(),
            lifetime: config.token_lifetime,
            issued: RwLock::new(HashMap::new()),
        });
        let fcm = Arc::new(Fcm {
            state: state.clone(),
            oauth: oauth.clone(),
            project_id: config.project_id.clone(),
            send_path: format!("/v1/projects/{}/messages:send", config.project_id),
            next_message: AtomicU64::new(1),
        });

        let credentials_file = config.dir.join("fcm-service-account.json");
        let credentials = json!({
            "type": "service_account",
            "project_id": config.project_id,
            "private_key_id": "clarion-mock-key",
            "private_key": key.serialize_pem(),
            "client_email": client_email,
            "client_id": "100000000000000000001",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": token_uri,
            "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
            "client_x509_cert_url": "https://www.googleapis.com/robot/v1/metadata/x509/clarion-mock",
        });
        std::fs::create_dir_all(&config.dir)?;
        std::fs::write(&credentials_file, serde_json::to_vec_pretty(&credentials)?)
            .with_context(|| format!("writing {}", credentials_file.display()))?;

        let send = serve_tls(
            config.addr,
            pki.server_config(Protocols::Http2Only.alpn())?,
            move |request, _| {
                let fcm = fcm.clone();
                async move { fcm.handle(request).await }
            },
        )
        .await
        .context("binding the FCM mock")?;
        let token_oauth = oauth.clone();
        let token = serve_tls(
            token_listener,
            pki.server_config(Protocols::Http2AndHttp1.alpn())?,
            move |request, _| {
                let oauth = token_oauth.clone();
                async move { oauth.handle(request) }
            },
        )
        .await
        .context("binding the OAuth2 token endpoint")?;
        Ok(Self {
            endpoint: format!("https://{}", send.addr),
            token_uri,
            control: format!("http://{}", control.addr),
            ca_file,
            credentials_file,
            project_id: config.project_id,
            client_email,
            state,
            oauth,
            _send: send,
            _token: token,
            _control: control,
        })
    }

    /// Forgets every access token issued so far, as if they had all
    /// expired: the next push with one is answered 401 `UNAUTHENTICATED`.
    pub fn revoke_access_tokens(&self) {
        self.oauth
            .issued
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// The dispatcher settings that point at this mock.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("CLARION_FCM_ENDPOINT".into(), self.endpoint.clone()),
            (
                "CLARION_FCM_CREDENTIALS_FILE".into(),
                self.credentials_file.display().to_string(),
            ),
            ("CLARION_FCM_PROJECT_ID".into(), self.project_id.clone()),
        ]
    }
}

#[derive(Deserialize)]
struct AssertionClaims {
    iss: String,
    aud: String,
    scope: String,
    iat: u64,
    exp: u64,
}

/// A base64url JWT segment, padded or not, as JSON.
fn decode_segment<T: serde::de::DeserializeOwned>(segment: &str) -> Option<T> {
    use base64::Engine;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    serde_json::from_slice(&LENIENT.decode(segment).ok()?).ok()
}

struct OAuth {
    decoding_key: DecodingKey,
    client_email: String,
    token_uri: String,
    lifetime: Duration,
    /// Access token → when it expires.
    issued: RwLock<HashMap<String, Instant>>,
}

impl OAuth {
    fn handle(&self, request: Request<Bytes>) -> Response<Bytes> {
        if request.method() != Method::POST || request.uri().path() != "/token" {
            return json_response(404, &json!({"error": "not_found"}));
        }
        if request.body().len() > MAX_REQUEST_BODY {
            return oauth_error("invalid_request", "request too large");
        }
        let form: HashMap<String, String> =
            url::form_urlencoded::parse(request.body()).into_owned().collect();
        if form.get("grant_type").map(String::as_str) != Some(JWT_BEARER) {
            return json_response(
                400,
                &json!({"error": "unsupported_grant_type", "error_description": "Invalid grant_type"}),
            );
        }
        let Some(assertion) = form.get("assertion") else {
            return oauth_error("invalid_request", "Missing required parameter: assertion");
        };
        match self.check_assertion(assertion) {
            Ok(()) => {
                let token = format!("ya29.mock-{}", uuid::Uuid::new_v4().simple());
                let mut issued = self.issued.write().unwrap_or_else(|p| p.into_inner());
                issued.retain(|_, expires| *expires > Instant::now());
                issued.insert(token.clone(), Instant::now() + self.lifetime);
                json_response(
                    200,
                    &json!({"access_token": token, "expires_in": self.lifetime.as_secs(), "token_type": "Bearer"}),
                )
            }
            Err(description) => oauth_error("invalid_grant", description),
        }
    }

    /// Checks the assertion like Google does. Client libraries differ in
    /// whether they pad their base64url, so both forms are read; the
    /// signature covers the header and claims exactly as sent.
    fn check_assertion(&self, assertion: &str) -> Result<(), &'static str> {
        let segments: Vec<&str> = assertion.split('.').collect();
        let [header, claims, signature] = segments.as_slice() else {
            return Err("Invalid JWT: malformed");
        };
        let header: Value = decode_segment(header).ok_or("Invalid JWT: malformed header")?;
        if header["alg"] != "RS256" {
            return Err("Invalid JWT: algorithm must be RS256");
        }
        let signed = &assertion[..assertion.rfind('.').unwrap_or(0)];
        let valid = jsonwebtoken::crypto::verify(
            signature.trim_end_matches('='),
            signed.as_bytes(),
            &self.decoding_key,
            Algorithm::RS256,
        )
        .unwrap_or(false);
        if !valid {
            return Err("Invalid JWT Signature.");
        }
        let claims: AssertionClaims = decode_segment(claims).ok_or("Invalid JWT: malformed claims")?;
        if claims.iss != self.client_email {
            return Err("Invalid JWT: issuer");
        }
        if claims.aud != self.token_uri {
            return Err("Invalid JWT: audience");
        }
        let now = unix_s();
        let short_lived = claims.exp >= claims.iat && claims.exp - claims.iat <= MAX_ASSERTION_LIFETIME_S;
        if claims.iat > now + CLOCK_SKEW_S || claims.exp + CLOCK_SKEW_S < now || !short_lived {
            return Err(
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe",
            );
        }
        if !claims.scope.split(' ').any(|scope| scope == FCM_SCOPE) {
            return Err("Invalid OAuth scope or ID token audience provided.");
        }
        Ok(())
    }

    fn accepts(&self, token: &str) -> bool {
        self.issued
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            .is_some_and(|expires| *expires > Instant::now())
    }
}

fn oauth_error(error: &str, description: &str) -> Response<Bytes> {
    json_response(400, &json!({"error": error, "error_description": description}))
}

struct Fcm {
    state: Arc<MockState>,
    oauth: Arc<OAuth>,
    project_id: String,
    /// `/v1/projects/{project_id}/messages:send`.
    send_path: String,
    next_message: AtomicU64,
}

/// A Google API error: HTTP status, `error.status`, the FCM `errorCode`.
struct GoogleError {
    code: u16,
    status: &'static str,
    error_code: Option<&'static str>,
    message: String,
    retry_after_s: Option<u64>,
}

fn google(
    code: u16,
    status: &'static str,
    error_code: Option<&'static str>,
    message: impl Into<String>,
) -> GoogleError {
    GoogleError {
        code,
        status,
        error_code,
        message: message.into(),
        retry_after_s: None,
    }
}

fn invalid_argument(message: impl Into<String>) -> GoogleError {
    google(400, "INVALID_ARGUMENT", Some("INVALID_ARGUMENT"), message)
}

impl Fcm {
    async fn handle(&self, request: Request<Bytes>) -> Response<Bytes> {
        let started = Instant::now();
        let (token, outcome) = self.check(request);
        self.state.faults.delay().await;
        if let Some(status) = self.state.faults.impostor_status() {
            self.state.accounting.record(&token, status, started.elapsed());
            return impostor_page(status);
        }
        let status = outcome.as_ref().map_or_else(|err| err.code, |_| 200);
        self.state.accounting.record(&token, status, started.elapsed());
        match outcome {
            Ok((name, notification_id)) => {
                self.state.phones_accepted(notification_id, &token);
                json_response(200, &Sent { name: &name })
            }
            Err(err) => {
                let mut error = json!({"code": err.code, "message": err.message, "status": err.status});
                if let Some(code) = err.error_code {
                    error["details"] = json!([{
                        "@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
                        "errorCode": code,
                    }]);
                }
                let body = json!({"error": error}).to_string();
                let mut builder = Response::builder()
                    .status(err.code)
                    .header("content-type", "application/json; charset=UTF-8");
                if let Some(seconds) = err.retry_after_s {
                    builder = builder.header("retry-after", seconds);
                }
                builder
                    .body(Bytes::from(body))
                    .unwrap_or_else(|_| Response::new(Bytes::new()))
            }
        }
    }

    /// The token the request was for (empty when unreadable) and its
    /// outcome: the message's name and notification id when accepted.
    fn check(&self, request: Request<Bytes>) -> (String, Result<(String, uuid::Uuid), GoogleError>) {
        let path = request.uri().path();
        if request.method() != Method::POST
            || !path.starts_with("/v1/projects/")
            || !path.ends_with("/messages:send")
        {
            return (String::new(), Err(google(404, "NOT_FOUND", None, "Not found")));
        }
        let authorized = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|token| self.oauth.accepts(token));
        if !authorized {
            let message = "Request had invalid authentication credentials. Expected OAuth 2 access token.";
            return (String::new(), Err(google(401, "UNAUTHENTICATED", None, message)));
        }
        if path != self.send_path {
            let message = "Permission 'cloudmessaging.messages.create' denied on resource";
            return (
                String::new(),
                Err(google(403, "PERMISSION_DENIED", None, message)),
            );
        }
        let (parts, body) = request.into_parts();
        if body.len() > MAX_REQUEST_BODY {
            return (
                String::new(),
                Err(invalid_argument("Request payload size exceeds the limit")),
            );
        }
        // One pass over the request into borrowed fields; the nested
        // objects stay raw JSON text until they are checked.
        let request = match serde_json::from_slice::<SendRequest>(&body) {
            Ok(request) => request,
            Err(err) => {
                return (
                    String::new(),
                    Err(invalid_argument(format!("Invalid JSON payload received. {err}"))),
                );
            }
        };
        let Some(message) = request.message else {
            return (
                String::new(),
                Err(invalid_argument(
                    "Invalid JSON payload received. Missing 'message'.",
                )),
            );
        };
        let token = message.token.as_deref().unwrap_or_default().to_owned();
        let outcome = self
            .check_message(&message, &token)
            .and_then(|id| self.judge(&token).map(|name| (name, id)));
        if outcome.is_ok() && self.state.keeps() {
            self.state.keep(Received {
                token: token.clone(),
                path: parts.uri.path().to_owned(),
                headers: parts.headers,
                body: body.clone(),
            });
        }
        (token, outcome)
    }

    /// The message's notification id when the message is well formed.
    fn check_message(&self, message: &Message, token: &str) -> Result<uuid::Uuid, GoogleError> {
        if token.is_empty() {
            return Err(invalid_argument("Recipient of the message is not set."));
        }
        if let Some(notification) = message.notification {
            let notification = fields(notification)
                .ok_or_else(|| invalid_argument("Invalid value at 'message.notification'"))?;
            for field in ["title", "body", "image"] {
                if notification.get(field).is_some_and(|v| !is_string(v)) {
                    return Err(invalid_argument(format!(
                        "Invalid value at 'message.notification.{field}'"
                    )));
                }
            }
        }
        let mut notification_id = None;
        if let Some(data) = message.data {
            let Some(data) = fields(data).filter(|map| map.values().all(|v| is_string(v))) else {
                return Err(invalid_argument(
                    "Invalid value at 'message.data': values must be strings",
                ));
            };
            notification_id = data
                .get(NOTIFICATION_ID)
                .and_then(|raw| string(raw))
                .and_then(|id| uuid::Uuid::parse_str(&id).ok());
        }
        if let Some(android) = &message.android {
            if let Some(priority) = android.priority {
                let valid = string(priority)
                    .is_some_and(|p| p.eq_ignore_ascii_case("high") || p.eq_ignore_ascii_case("normal"));
                if !valid {
                    return Err(invalid_argument("Invalid value at 'message.android.priority'"));
                }
            }
            if android
                .ttl
                .is_some_and(|ttl| !string(ttl).is_some_and(|ttl| is_duration(&ttl)))
            {
                return Err(invalid_argument(
                    "Invalid value at 'message.android.ttl' (type.googleapis.com/google.protobuf.Duration)",
                ));
            }
            if android.collapse_key.is_some_and(|v| !is_string(v)) {
                return Err(invalid_argument(
                    "Invalid value at 'message.android.collapse_key'",
                ));
            }
            if let Some(shown) = android.notification {
                check_android_notification(shown)?;
            }
        }
        let size = [message.notification, message.data]
            .iter()
            .flatten()
            .map(|raw| raw.get().len())
            .sum::<usize>();
        if size > MAX_PAYLOAD {
            return Err(invalid_argument("Android message is too big"));
        }
        if clarion_proto::platform::normalize_token(clarion_proto::Platform::Android, token).is_err() {
            return Err(invalid_argument(
                "The registration token is not a valid FCM registration token",
            ));
        }
        notification_id.ok_or_else(|| invalid_argument(MISSING_NOTIFICATION_ID))
    }

    fn judge(&self, token: &str) -> Result<String, GoogleError> {
        let faults = &self.state.faults;
        match faults.judge(token) {
            Verdict::Serve => {
                let n = self.next_message.fetch_add(1, Ordering::Relaxed);
                Ok(format!(
                    "projects/{}/messages/0:{}%{n:016x}",
                    self.project_id,
                    unix_ms()
                ))
            }
            Verdict::Dead => Err(google(
                404,
                "NOT_FOUND",
                Some("UNREGISTERED"),
                "Requested entity was not found.",
            )),
            Verdict::Invalid => Err(invalid_argument(
                "The registration token is not a valid FCM registration token",
            )),
            Verdict::Foreign => Err(google(
                403,
                "PERMISSION_DENIED",
                Some("SENDER_ID_MISMATCH"),
                "SenderId mismatch",
            )),
            Verdict::Limited { retry_after_s } => Err(GoogleError {
                retry_after_s: Some(retry_after_s),
                ..google(
                    429,
                    "RESOURCE_EXHAUSTED",
                    Some("QUOTA_EXCEEDED"),
                    "Quota exceeded for quota metric 'Messages'",
                )
            }),
            Verdict::Error(status) => Err(match status {
                401 => google(
                    401,
                    "UNAUTHENTICATED",
                    Some("THIRD_PARTY_AUTH_ERROR"),
                    "Auth error from APNS or Web Push Service",
                ),
                429 => GoogleError {
                    retry_after_s: Some(faults.retry_after_s()),
                    ..google(
                        429,
                        "RESOURCE_EXHAUSTED",
                        Some("QUOTA_EXCEEDED"),
                        "Quota exceeded",
                    )
                },
                503 => GoogleError {
                    retry_after_s: Some(faults.retry_after_s()),
                    ..google(
                        503,
                        "UNAVAILABLE",
                        Some("UNAVAILABLE"),
                        "The service is currently unavailable.",
                    )
                },
                _ => google(500, "INTERNAL", Some("INTERNAL"), "Internal error encountered."),
            }),
        }
    }
}

/// FCM's answer to an accepted message.
#[derive(Serialize)]
struct Sent<'a> {
    name: &'a str,
}

/// A v1 send request, as far as the mock reads it.
#[derive(Deserialize)]
struct SendRequest<'a> {
    #[serde(borrow)]
    message: Option<Message<'a>>,
}

/// A v1 message: every field FCM knows; any other is refused, as FCM does.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Message<'a> {
    #[allow(dead_code, reason = "known to FCM, accepted unchecked")]
    #[serde(default)]
    name: Option<IgnoredAny>,
    #[serde(borrow, default)]
    token: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    notification: Option<&'a RawValue>,
    #[serde(borrow, default)]
    android: Option<AndroidConfig<'a>>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
    #[allow(dead_code, reason = "known to FCM, accepted unchecked")]
    #[serde(default)]
    apns: Option<IgnoredAny>,
    #[allow(dead_code, reason = "known to FCM, accepted unchecked")]
    #[serde(default)]
    webpush: Option<IgnoredAny>,
    #[allow(dead_code, reason = "known to FCM, accepted unchecked")]
    #[serde(default)]
    fcm_options: Option<IgnoredAny>,
}

/// `message.android`: the fields the mock checks (others pass unread).
#[derive(Deserialize)]
struct AndroidConfig<'a> {
    #[serde(borrow, default)]
    priority: Option<&'a RawValue>,
    #[serde(borrow, default)]
    ttl: Option<&'a RawValue>,
    #[serde(borrow, default)]
    collapse_key: Option<&'a RawValue>,
    #[serde(borrow, default)]
    notification: Option<&'a RawValue>,
}

/// `android.notification.notification_priority` values FCM knows.
const NOTIFICATION_PRIORITIES: [&str; 6] = [
    "PRIORITY_UNSPECIFIED",
    "PRIORITY_MIN",
    "PRIORITY_LOW",
    "PRIORITY_DEFAULT",
    "PRIORITY_HIGH",
    "PRIORITY_MAX",
];

/// Checks `android.notification`: text fields are strings, the count a
/// non-negative integer, the priority one of FCM's names.
fn check_android_notification(raw: &RawValue) -> Result<(), GoogleError> {
    let at =
        |field: &str| invalid_argument(format!("Invalid value at 'message.android.notification.{field}'"));
    let shown =
        fields(raw).ok_or_else(|| invalid_argument("Invalid value at 'message.android.notification'"))?;
    for field in [
        "title",
        "body",
        "sound",
        "click_action",
        "channel_id",
        "icon",
        "color",
        "tag",
    ] {
        if shown.get(field).is_some_and(|v| !is_string(v)) {
            return Err(at(field));
        }
    }
    if let Some(count) = shown.get("notification_count")
        && serde_json::from_str::<u32>(count.get()).is_err()
    {
        return Err(at("notification_count"));
    }
    if let Some(priority) = shown.get("notification_priority")
        && !string(priority).is_some_and(|p| NOTIFICATION_PRIORITIES.contains(&p.as_ref()))
    {
        return Err(at("notification_priority"));
    }
    Ok(())
}

/// A JSON object's fields, each kept as the raw JSON text it was sent as
/// (a handful per object: a B-tree compares a few keys, a hash map would
/// hash every one).
type Fields<'a> = BTreeMap<&'a str, &'a RawValue>;

/// `raw` read as an object, if it is one.
fn fields(raw: &RawValue) -> Option<Fields<'_>> {
    serde_json::from_str(raw.get()).ok()
}

fn is_string(raw: &RawValue) -> bool {
    raw.get().starts_with('"')
}

/// `raw` read as a string, if it is one.
fn string(raw: &RawValue) -> Option<Cow<'_, str>> {
    serde_json::from_str(raw.get()).ok()
}

/// A protobuf Duration in JSON: seconds with up to nine decimals and `s`.
fn is_duration(value: &str) -> bool {
    let Some(number) = value.strip_suffix('s') else {
        return false;
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && fraction.len() <= 9
        && fraction.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::is_duration;

    #[test]
    fn durations_look_like_protobuf_json() {
        for good in ["3600s", "0s", "1.5s", "10.000000001s"] {
            assert!(is_duration(good), "{good}");
        }
        for bad in ["3600", "s", "1.s5", "-1s", "1.0000000001s", "1h"] {
            assert!(!is_duration(bad), "{bad}");
        }
    }
}
