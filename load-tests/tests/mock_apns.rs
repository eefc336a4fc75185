//! The APNs mock driven by a plain HTTP/2 client: every answer Apple gives,
//! the provider-token checks, the faults, the control API, no HTTP/1.1, and HTTP/2 by prior knowledge
//! (no ALPN) as Apple serves it; and Clarion's own contract, a UUID
//! `notification_id` beside `aps`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clarion_load_tests::mocks::apns::MISSING_NOTIFICATION_ID;
use clarion_load_tests::mocks::{ApnsMock, ApnsMockConfig, FaultConfig, Stats, digest};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Client, Response, StatusCode};
use serde_json::{Value, json};

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// The notification id every test push carries.
const NOTIFICATION_ID: &str = "6f1c2b3a-9d4e-4f00-8a11-0123456789ab";

struct Fixture {
    mock: ApnsMock,
    client: Client,
    jwt: String,
    _dir: TempDir,
}

/// The parts of a push a test may change.
struct Push {
    headers: HeaderMap,
    body: String,
}

impl Push {
    fn set(&mut self, name: &'static str, value: &str) {
        self.headers
            .insert(name, HeaderValue::from_str(value).expect("a header value"));
    }

    fn remove(&mut self, name: &'static str) {
        self.headers.remove(name);
    }
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn provider_token(key_pem: &[u8], kid: &str, iss: &str, iat: u64) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid.to_owned());
    let key = EncodingKey::from_ec_pem(key_pem).expect("a PKCS#8 EC key");
    jsonwebtoken::encode(&header, &json!({"iss": iss, "iat": iat}), &key).expect("signed")
}

async fn start() -> Fixture {
    let dir = std::env::temp_dir().join(format!("clarion-apns-{}", uuid::Uuid::new_v4().simple()));
    let mock = ApnsMock::start(ApnsMockConfig::local(dir.clone()))
        .await
        .expect("mock starts");
    let client = common::client(&mock.ca_file, false);
    let key = std::fs::read(&mock.key_file).unwrap();
    let jwt = provider_token(&key, &mock.key_id, &mock.team_id, now());
    Fixture {
        mock,
        client,
        jwt,
        _dir: TempDir(dir),
    }
}

impl Fixture {
    /// A push with every header right; `edit` changes headers or body first.
    async fn push_with(&self, token: &str, edit: impl FnOnce(&mut Push)) -> Response {
        let mut push = Push {
            headers: HeaderMap::new(),
            body: json!({"aps": {"alert": {"title": "Breaking", "body": "News"}},
                         "notification_id": NOTIFICATION_ID})
            .to_string(),
        };
        push.set("authorization", &format!("bearer {}", self.jwt));
        push.set("apns-topic", &self.mock.bundle_id);
        push.set("apns-push-type", "alert");
        push.set("apns-priority", "10");
        push.set("apns-expiration", "1900000000");
        edit(&mut push);
        self.client
            .post(format!("{}/3/device/{token}", self.mock.endpoint))
            .headers(push.headers)
            .body(push.body)
            .send()
            .await
            .expect("request")
    }

    async fn push(&self, token: &str) -> Response {
        self.push_with(token, |_| {}).await
    }

    async fn faults(&self, faults: FaultConfig) {
        common::set_faults(&self.client, &self.mock.control, &faults).await;
    }

    async fn stats(&self) -> Stats {
        common::stats(&self.client, &self.mock.control).await
    }
}

async fn reason(response: Response) -> (StatusCode, Value) {
    assert!(
        response.headers().contains_key("apns-id"),
        "every answer carries apns-id"
    );
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_valid_push_is_accepted_over_http2_and_counted() {
    let f = start().await;
    let id = "123e4567-e89b-12d3-a456-426614174000";
    let response = f.push_with(TOKEN, |p| p.set("apns-id", id)).await;
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["apns-id"],
        id,
        "the request's apns-id is echoed"
    );
    let stats = f.stats().await;
    assert_eq!((stats.accepted, stats.unique_tokens), (1, 1));
    assert_eq!(stats.digest, digest([TOKEN]));
    let lookup: Value = f
        .client
        .post(format!("{}/lookup", f.mock.control))
        .json(&json!({"tokens": [TOKEN, "0".repeat(64)]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(lookup["counts"][0]["count"], 1);
    assert_eq!(lookup["counts"][1]["count"], 0);
}

#[tokio::test]
async fn malformed_requests_get_apples_reasons() {
    let f = start().await;
    let long_collapse = "c".repeat(65);
    type Edit = Box<dyn FnOnce(&mut Push)>;
    let cases: Vec<(&str, Edit, u16, &str)> = vec![
        (
            "no topic",
            Box::new(|p| p.remove("apns-topic")),
            400,
            "MissingTopic",
        ),
        (
            "other app",
            Box::new(|p| p.set("apns-topic", "com.other.app")),
            400,
            "DeviceTokenNotForTopic",
        ),
        (
            "voip push",
            Box::new(|p| p.set("apns-push-type", "voip")),
            400,
            "InvalidPushType",
        ),
        (
            "priority 7",
            Box::new(|p| p.set("apns-priority", "7")),
            400,
            "BadPriority",
        ),
        (
            "expiration text",
            Box::new(|p| p.set("apns-expiration", "tomorrow")),
            400,
            "BadExpirationDate",
        ),
        (
            "collapse id",
            Box::new(move |p| p.set("apns-collapse-id", &long_collapse)),
            400,
            "BadCollapseId",
        ),
        (
            "apns-id",
            Box::new(|p| p.set("apns-id", "not-a-uuid")),
            400,
            "BadMessageId",
        ),
        (
            "doubled header",
            Box::new(|p| {
                p.headers
                    .append("apns-topic", HeaderValue::from_static("com.clarion.news"));
            }),
            400,
            "DuplicateHeaders",
        ),
        ("empty body", Box::new(|p| p.body.clear()), 400, "PayloadEmpty"),
        (
            "no aps",
            Box::new(|p| p.body = r#"{"link":"x"}"#.into()),
            400,
            "PayloadEmpty",
        ),
        (
            "alert without alert",
            Box::new(|p| p.body = r#"{"aps":{"sound":"default"}}"#.into()),
            400,
            "PayloadEmpty",
        ),
        (
            "too large",
            Box::new(|p| p.body = json!({"aps": {"alert": "x".repeat(4100)}}).to_string()),
            413,
            "PayloadTooLarge",
        ),
        (
            "larger than the server reads",
            Box::new(|p| p.body = json!({"aps": {"alert": "x".repeat(100 * 1024)}}).to_string()),
            413,
            "PayloadTooLarge",
        ),
    ];
    for (case, edit, status, expected) in cases {
        let (got, body) = reason(f.push_with(TOKEN, edit).await).await;
        assert_eq!(
            (got.as_u16(), body["reason"].as_str()),
            (status, Some(expected)),
            "{case}"
        );
    }
    // Background pushes take priority 5 and need no alert.
    let response = f
        .push_with(TOKEN, |p| {
            p.set("apns-push-type", "background");
            p.set("apns-priority", "5");
            p.body = json!({"aps": {"content-available": 1}, "notification_id": NOTIFICATION_ID}).to_string();
        })
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let (status, body) = reason(f.push("not-hex").await).await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (StatusCode::BAD_REQUEST, Some("BadDeviceToken"))
    );
}

#[tokio::test]
async fn a_push_without_a_uuid_notification_id_is_refused_and_the_id_is_kept() {
    let f = start().await;
    let aps = json!({"alert": "News"});
    for (case, body) in [
        ("missing", json!({"aps": aps})),
        ("not a uuid", json!({"aps": aps, "notification_id": "42"})),
        ("not a string", json!({"aps": aps, "notification_id": 42})),
        (
            "inside aps",
            json!({"aps": {"alert": "News", "notification_id": NOTIFICATION_ID}}),
        ),
    ] {
        let (status, answer) = reason(f.push_with(TOKEN, |p| p.body = body.to_string()).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{case}");
        assert_eq!(answer["reason"], MISSING_NOTIFICATION_ID, "{case}");
    }
    assert_eq!(f.stats().await.accepted, 0);
    assert_eq!(f.push(TOKEN).await.status(), StatusCode::OK);
    let kept = f.mock.state.received_by(TOKEN).expect("the push is kept");
    assert_eq!(kept.json()["notification_id"], NOTIFICATION_ID);
}

#[tokio::test]
async fn provider_tokens_are_checked_like_apple_does() {
    let f = start().await;
    let key = std::fs::read(&f.mock.key_file).unwrap();
    let other_key = rcgen::KeyPair::generate().unwrap().serialize_pem();
    let cases = [
        (
            "another key",
            provider_token(other_key.as_bytes(), &f.mock.key_id, &f.mock.team_id, now()),
            "InvalidProviderToken",
        ),
        (
            "wrong kid",
            provider_token(&key, "WRONGKEY01", &f.mock.team_id, now()),
            "InvalidProviderToken",
        ),
        (
            "wrong team",
            provider_token(&key, &f.mock.key_id, "OTHERTEAM1", now()),
            "InvalidProviderToken",
        ),
        (
            "stale iat",
            provider_token(&key, &f.mock.key_id, &f.mock.team_id, now() - 3700),
            "ExpiredProviderToken",
        ),
        (
            "future iat",
            provider_token(&key, &f.mock.key_id, &f.mock.team_id, now() + 3600),
            "InvalidProviderToken",
        ),
        ("garbage", "not.a.jwt".to_owned(), "InvalidProviderToken"),
    ];
    for (case, jwt, expected) in cases {
        let response = f
            .push_with(TOKEN, |p| p.set("authorization", &format!("bearer {jwt}")))
            .await;
        let (status, body) = reason(response).await;
        assert_eq!(
            (status, body["reason"].as_str()),
            (StatusCode::FORBIDDEN, Some(expected)),
            "{case}"
        );
    }
    let response = f.push_with(TOKEN, |p| p.remove("authorization")).await;
    assert_eq!(reason(response).await.1["reason"], "MissingProviderToken");
}

#[tokio::test]
async fn switching_provider_tokens_on_one_connection_too_often_is_refused() {
    let f = start().await;
    assert_eq!(f.push(TOKEN).await.status(), StatusCode::OK);
    let key = std::fs::read(&f.mock.key_file).unwrap();
    let newer = provider_token(&key, &f.mock.key_id, &f.mock.team_id, now() - 1);
    // reqwest keeps the HTTP/2 connection: the second token arrives on it.
    let response = f
        .push_with(TOKEN, |p| p.set("authorization", &format!("bearer {newer}")))
        .await;
    let (status, body) = reason(response).await;
    assert_eq!(
        (status.as_u16(), body["reason"].as_str()),
        (429, Some("TooManyProviderTokenUpdates"))
    );
}

#[tokio::test]
async fn faults_answer_410_400_429_500_503_and_add_latency() {
    let f = start().await;
    let dead = format!("dead{}", &TOKEN[4..]);
    let invalid = "1".repeat(64);
    let foreign = "2".repeat(64);
    f.faults(FaultConfig {
        dead_prefixes: vec!["dead".into()],
        invalid: vec![invalid.clone()],
        foreign: vec![foreign.clone()],
        ..FaultConfig::default()
    })
    .await;
    let (status, body) = reason(f.push(&dead).await).await;
    assert_eq!(
        (status.as_u16(), body["reason"].as_str()),
        (410, Some("Unregistered"))
    );
    assert!(
        body["timestamp"]
            .as_u64()
            .is_some_and(|ms| ms > 1_700_000_000_000),
        "{body}"
    );
    let (status, body) = reason(f.push(&invalid).await).await;
    assert_eq!(
        (status.as_u16(), body["reason"].as_str()),
        (400, Some("BadDeviceToken"))
    );
    let (status, body) = reason(f.push(&foreign).await).await;
    assert_eq!(
        (status.as_u16(), body["reason"].as_str()),
        (400, Some("DeviceTokenNotForTopic"))
    );

    for (code, expected) in [
        (500u16, "InternalServerError"),
        (503, "ServiceUnavailable"),
        (429, "TooManyRequests"),
    ] {
        f.faults(FaultConfig {
            error_rates: [(code, 1.0)].into(),
            ..FaultConfig::default()
        })
        .await;
        let (status, body) = reason(f.push(TOKEN).await).await;
        assert_eq!((status.as_u16(), body["reason"].as_str()), (code, Some(expected)));
    }

    f.faults(FaultConfig {
        throttle_per_s: Some(2),
        ..FaultConfig::default()
    })
    .await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(f.push(TOKEN).await.status().as_u16());
    }
    assert!(
        statuses.contains(&429),
        "the throttle answers 429 past its rate: {statuses:?}"
    );

    f.faults(FaultConfig {
        latency_ms: 120.0,
        ..FaultConfig::default()
    })
    .await;
    let started = std::time::Instant::now();
    assert_eq!(f.push(TOKEN).await.status(), StatusCode::OK);
    assert!(
        started.elapsed() >= Duration::from_millis(120),
        "latency is added"
    );

    let stats = f.stats().await;
    assert_eq!(stats.by_status.get(&410), Some(&1));
    assert!(stats.latency.max_us >= 120_000);
    let reset = f
        .client
        .post(format!("{}/reset", f.mock.control))
        .send()
        .await
        .unwrap();
    assert_eq!(reset.status(), StatusCode::NO_CONTENT);
    assert_eq!(f.stats().await.by_status.len(), 0);
}

#[tokio::test]
async fn http1_clients_are_refused() {
    let f = start().await;
    let http1 = common::client(&f.mock.ca_file, true);
    let result = http1
        .post(format!("{}/3/device/{TOKEN}", f.mock.endpoint))
        .body("{}")
        .send()
        .await;
    assert!(result.is_err(), "HTTP/1.1 must not get through: {result:?}");
}

#[tokio::test]
async fn a_push_without_apns_push_type_is_an_alert_as_apple_reads_it() {
    let f = start().await;
    let response = f.push_with(TOKEN, |p| p.remove("apns-push-type")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let silent = f
        .push_with(TOKEN, |p| {
            p.remove("apns-push-type");
            p.body = json!({"aps": {"content-available": 1}, "notification_id": NOTIFICATION_ID}).to_string();
        })
        .await;
    let (status, body) = reason(silent).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["reason"], "PayloadEmpty",
        "without the header the push is an alert and needs one"
    );
}

#[tokio::test]
async fn http2_without_alpn_is_served_by_prior_knowledge() {
    let f = start().await;
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("{}/3/device/{TOKEN}", f.mock.endpoint))
        .header("authorization", format!("bearer {}", f.jwt))
        .header("apns-topic", &f.mock.bundle_id)
        .header("apns-push-type", "alert")
        .body(())
        .unwrap();
    let body = json!({"aps": {"alert": "News"}, "notification_id": NOTIFICATION_ID}).to_string();
    let (status, answer) =
        common::send_without_alpn(&f.mock.endpoint, &f.mock.ca_file, request, body.into()).await;
    assert_eq!(status, http::StatusCode::OK, "answer: {answer:?}");
    assert_eq!(f.stats().await.accepted, 1);
}

#[tokio::test]
async fn about_a_thousand_concurrent_streams_are_advertised() {
    let f = start().await;
    let streams = common::max_concurrent_streams(&f.mock.endpoint, &f.mock.ca_file).await;
    assert_eq!(streams, 1000);
}

mod common;

#[test]
fn the_mock_binary_prints_the_sandbox_endpoint_beside_the_production_one() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let dir = TempDir(std::env::temp_dir().join(format!("clarion-mock-apns-bin-{}", std::process::id())));
    let mut child = Command::new(env!("CARGO_BIN_EXE_clarion-mock-apns"))
        .args(["--addr=127.0.0.1:0", "--control-addr=127.0.0.1:0", "--threads=1"])
        .arg(format!("--dir={}", dir.0.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the mock binary starts");
    let stdout = child.stdout.take().expect("its output");
    // Read on a thread of its own, so a mock that prints nothing fails the
    // test after the deadline instead of hanging it.
    let (lines, printed) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let last = line.starts_with("CLARION_EXTRA_CA_FILE=");
            if lines.send(line).is_err() || last {
                break;
            }
        }
    });
    let mut settings = std::collections::HashMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !settings.contains_key("CLARION_EXTRA_CA_FILE") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok(line) = printed.recv_timeout(left) else {
            break;
        };
        if let Some((name, value)) = line.split_once('=') {
            settings.insert(name.to_owned(), value.to_owned());
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let production = settings
        .get("CLARION_APNS_ENDPOINT")
        .expect("the endpoint is printed");
    assert!(production.starts_with("https://127.0.0.1:"), "{production}");
    assert_eq!(
        settings.get("CLARION_APNS_SANDBOX_ENDPOINT"),
        Some(production),
        "the sandbox endpoint is printed: {settings:?}"
    );
}

impl Fixture {
    /// A channel-management or broadcast request with a valid provider
    /// token, `channel` in `apns-channel-id`.
    async fn channel_request(
        &self,
        method: reqwest::Method,
        path: &str,
        channel: Option<&str>,
        headers: &[(&'static str, &str)],
        body: Option<Value>,
    ) -> (StatusCode, HeaderMap, Value) {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.mock.endpoint))
            .header("authorization", format!("bearer {}", self.jwt));
        if let Some(channel) = channel {
            request = request.header("apns-channel-id", channel);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.body(body.to_string());
        }
        let response = request.send().await.expect("request");
        let status = response.status();
        let headers = response.headers().clone();
        (status, headers, response.json().await.unwrap_or(Value::Null))
    }

    fn channels_path(&self) -> String {
        format!("/1/apps/{}/channels", self.mock.bundle_id)
    }

    fn broadcast_path(&self) -> String {
        format!("/4/broadcasts/apps/{}", self.mock.bundle_id)
    }

    async fn broadcast(&self, channel: &str, body: Value) -> (StatusCode, Value) {
        let (status, _, answer) = self
            .channel_request(
                reqwest::Method::POST,
                &self.broadcast_path(),
                Some(channel),
                &[("apns-push-type", "liveactivity"), ("apns-priority", "10")],
                Some(body),
            )
            .await;
        (status, answer)
    }
}

fn update(event: &str, timestamp: u64, score: &str) -> Value {
    json!({"aps": {"event": event, "timestamp": timestamp, "content-state": {"score": score}}})
}

#[tokio::test]
async fn channels_are_created_read_listed_and_deleted_as_apple_documents() {
    let f = start().await;
    let create = json!({"message-storage-policy": 1, "push-type": "LiveActivity"});
    let (status, headers, _) = f
        .channel_request(reqwest::Method::POST, &f.channels_path(), None, &[], Some(create))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(headers.contains_key("apns-request-id"));
    let channel = headers["apns-channel-id"].to_str().unwrap().to_owned();
    assert!(!channel.is_empty());

    let (status, _, read) = f
        .channel_request(
            reqwest::Method::GET,
            &f.channels_path(),
            Some(&channel),
            &[],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        read,
        json!({"message-storage-policy": 1, "push-type": "LiveActivity"})
    );
    let (status, _, all) = f
        .channel_request(
            reqwest::Method::GET,
            &format!("/1/apps/{}/all-channels", f.mock.bundle_id),
            None,
            &[],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(all, json!({"channels": [channel]}));

    let (status, _, _) = f
        .channel_request(
            reqwest::Method::DELETE,
            &f.channels_path(),
            Some(&channel),
            &[],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(f.mock.channels.deleted(), std::slice::from_ref(&channel));
    let (status, _, gone) = f
        .channel_request(
            reqwest::Method::GET,
            &f.channels_path(),
            Some(&channel),
            &[],
            None,
        )
        .await;
    assert_eq!(
        (status, gone),
        (StatusCode::NOT_FOUND, json!({"reason": "ChannelNotRegistered"}))
    );
}

#[tokio::test]
async fn channel_requests_are_refused_with_apples_reasons() {
    let f = start().await;
    let path = f.channels_path();
    let post = reqwest::Method::POST;
    let cases: [(Option<Value>, Option<&str>, &str, &str); 5] = [
        (
            Some(json!({"message-storage-policy": 2, "push-type": "LiveActivity"})),
            None,
            "POST",
            "BadMessageStoragePolicy",
        ),
        (
            Some(json!({"message-storage-policy": 0, "push-type": "alert"})),
            None,
            "POST",
            "InvalidPushType",
        ),
        (None, None, "GET", "MissingChannelId"),
        (None, Some("not base64!"), "GET", "BadChannelId"),
        (None, Some("dW5rbm93bg=="), "DELETE", "ChannelNotRegistered"),
    ];
    for (body, channel, method, expected) in cases {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let (status, _, answer) = f.channel_request(method, &path, channel, &[], body).await;
        assert!(status.is_client_error(), "{expected}: {status}");
        assert_eq!(answer["reason"], expected);
    }
    // Another app's bundle, and no provider token.
    let (status, _, answer) = f
        .channel_request(post.clone(), "/1/apps/com.other.app/channels", None, &[], None)
        .await;
    assert_eq!(
        (status, answer["reason"].as_str()),
        (StatusCode::BAD_REQUEST, Some("TopicMismatch"))
    );
    let response = f
        .client
        .post(format!("{}{path}", f.mock.endpoint))
        .body(json!({"message-storage-policy": 0, "push-type": "LiveActivity"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(
        f.mock.channels.channel_ids().is_empty(),
        "nothing refused was created"
    );
}

#[tokio::test]
async fn broadcasts_are_checked_and_recorded_per_channel() {
    let f = start().await;
    let mut channels = Vec::new();
    for _ in 0..2 {
        let (status, headers, _) = f
            .channel_request(
                reqwest::Method::POST,
                &f.channels_path(),
                None,
                &[],
                Some(json!({"message-storage-policy": 0, "push-type": "LiveActivity"})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED);
        channels.push(headers["apns-channel-id"].to_str().unwrap().to_owned());
    }
    assert_eq!(
        f.broadcast(&channels[0], update("update", 1, "1-0")).await.0,
        StatusCode::OK
    );
    assert_eq!(
        f.broadcast(&channels[0], update("end", 2, "2-0")).await.0,
        StatusCode::OK
    );
    assert_eq!(
        f.broadcast(&channels[1], update("update", 1, "0-0")).await.0,
        StatusCode::OK
    );
    assert_eq!(
        f.mock.channels.updates(&channels[0]),
        Some(vec![update("update", 1, "1-0"), update("end", 2, "2-0")])
    );
    assert_eq!(
        f.mock.channels.updates(&channels[1]),
        Some(vec![update("update", 1, "0-0")])
    );

    // Refusals: each recorded nothing.
    let too_large = json!({"aps": {"event": "update", "timestamp": 3,
                                   "content-state": {"text": "x".repeat(5000)}}});
    assert_eq!(
        f.broadcast(&channels[1], too_large).await,
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({"reason": "PayloadTooLarge"})
        )
    );
    let no_event = json!({"aps": {"timestamp": 3, "content-state": {}}});
    assert_eq!(
        f.broadcast(&channels[1], no_event).await.1["reason"],
        "PayloadEmpty"
    );
    assert_eq!(
        f.broadcast("dW5rbm93bg==", update("update", 3, "x")).await,
        (StatusCode::NOT_FOUND, json!({"reason": "ChannelNotRegistered"}))
    );
    assert_eq!(
        f.broadcast("%%", update("update", 3, "x")).await.1["reason"],
        "BadChannelId"
    );
    let (status, _, answer) = f
        .channel_request(
            reqwest::Method::POST,
            &f.broadcast_path(),
            Some(&channels[1]),
            &[("apns-push-type", "alert")],
            Some(update("update", 3, "x")),
        )
        .await;
    assert_eq!(
        (status, answer["reason"].as_str()),
        (StatusCode::BAD_REQUEST, Some("InvalidPushType"))
    );
    let (_, _, answer) = f
        .channel_request(
            reqwest::Method::POST,
            &f.broadcast_path(),
            None,
            &[("apns-push-type", "liveactivity")],
            Some(update("update", 3, "x")),
        )
        .await;
    assert_eq!(answer["reason"], "MissingChannelId");
    assert_eq!(f.mock.channels.updates(&channels[1]).map(|u| u.len()), Some(1));
}

#[tokio::test]
async fn a_push_to_start_goes_to_the_liveactivity_topic() {
    let f = start().await;
    let start = json!({"aps": {"event": "start", "timestamp": 1, "attributes-type": "MatchAttributes",
                               "attributes": {"home": "A"}, "content-state": {"score": "0-0"},
                               "input-push-channel": "dW5rbm93bg==",
                               "alert": {"title": "Kick-off", "body": "A v B"}},
                       "notification_id": NOTIFICATION_ID})
    .to_string();
    let topic = format!("{}.push-type.liveactivity", f.mock.bundle_id);
    let response = f
        .push_with(TOKEN, |p| {
            p.set("apns-push-type", "liveactivity");
            p.set("apns-topic", &topic);
            p.body = start.clone();
        })
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let response = f
        .push_with(TOKEN, |p| {
            p.set("apns-push-type", "liveactivity");
            p.body = start.clone();
        })
        .await;
    assert_eq!(
        reason(response).await.1["reason"],
        "BadTopic",
        "the bare bundle id is no liveactivity topic"
    );
    let response = f
        .push_with(TOKEN, |p| {
            p.set("apns-push-type", "liveactivity");
            p.set("apns-topic", &topic);
        })
        .await;
    assert_eq!(
        reason(response).await.1["reason"],
        "PayloadEmpty",
        "an alert body has no event"
    );
}
