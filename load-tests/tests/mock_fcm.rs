//! The FCM mock driven by a plain HTTP/2 client: the OAuth2 token exchange
//! and its checks, every answer of the v1 send API, no HTTP/1.1 there, and HTTP/2 by prior
//! knowledge (no ALPN) as Google serves it; and Clarion's own contract, a
//! UUID `data.notification_id` in every message.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clarion_load_tests::mocks::fcm::{FCM_SCOPE, MISSING_NOTIFICATION_ID};
use clarion_load_tests::mocks::{FaultConfig, FcmMock, FcmMockConfig};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::{Client, Response, StatusCode};
use serde_json::{Value, json};

mod common;

const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

struct Fixture {
    mock: FcmMock,
    client: Client,
    account: Value,
    dir: std::path::PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn token(n: u64) -> String {
    format!("fcm{n:012}:APA91b{}", "Ab-_9".repeat(24))
}

async fn start_with(lifetime: Duration) -> Fixture {
    let dir = std::env::temp_dir().join(format!("clarion-fcm-{}", uuid::Uuid::new_v4().simple()));
    let mut config = FcmMockConfig::local(dir.clone());
    config.token_lifetime = lifetime;
    let mock = FcmMock::start(config).await.expect("mock starts");
    let client = common::client(&mock.ca_file, false);
    let account: Value = serde_json::from_slice(&std::fs::read(&mock.credentials_file).unwrap()).unwrap();
    Fixture {
        mock,
        client,
        account,
        dir,
    }
}

async fn start() -> Fixture {
    start_with(Duration::from_secs(3600)).await
}

impl Fixture {
    /// An assertion as Google's client libraries build it; `edit` changes the claims.
    fn assertion(&self, edit: impl FnOnce(&mut Value)) -> String {
        let mut claims = json!({
            "iss": self.account["client_email"],
            "scope": FCM_SCOPE,
            "aud": self.account["token_uri"],
            "iat": now(),
            "exp": now() + 3600,
        });
        edit(&mut claims);
        let key =
            EncodingKey::from_rsa_pem(self.account["private_key"].as_str().unwrap().as_bytes()).unwrap();
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &key).unwrap()
    }

    async fn exchange(&self, grant_type: &str, assertion: &str) -> (StatusCode, Value) {
        let response = self
            .client
            .post(self.account["token_uri"].as_str().unwrap())
            .form(&[("grant_type", grant_type), ("assertion", assertion)])
            .send()
            .await
            .unwrap();
        (response.status(), response.json().await.unwrap())
    }

    async fn access_token(&self) -> String {
        let (status, body) = self.exchange(JWT_BEARER, &self.assertion(|_| {})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["access_token"].as_str().unwrap().to_owned()
    }

    async fn send_as(&self, bearer: &str, project: &str, message: Value) -> Response {
        self.client
            .post(format!(
                "{}/v1/projects/{project}/messages:send",
                self.mock.endpoint
            ))
            .bearer_auth(bearer)
            .json(&json!({"message": message}))
            .send()
            .await
            .unwrap()
    }

    async fn send(&self, bearer: &str, message: Value) -> Response {
        self.send_as(bearer, &self.mock.project_id, message).await
    }

    async fn faults(&self, faults: FaultConfig) {
        common::set_faults(&self.client, &self.mock.control, &faults).await;
    }
}

fn message(token: &str) -> Value {
    json!({
        "token": token,
        "notification": {"title": "Breaking", "body": "News"},
        "android": {"priority": "high", "ttl": "3600s", "collapse_key": "breaking"},
        "data": {"link": "https://news.example/1", "notification_id": NOTIFICATION_ID},
    })
}

/// The notification id every test message carries.
const NOTIFICATION_ID: &str = "6f1c2b3a-9d4e-4f00-8a11-0123456789ab";

/// Status, `error.status` and the FCM error code of an answer.
async fn google_error(response: Response) -> (u16, String, Option<String>) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    let error_code = body["error"]["details"][0]["errorCode"]
        .as_str()
        .map(str::to_owned);
    (
        status,
        body["error"]["status"].as_str().unwrap_or_default().to_owned(),
        error_code,
    )
}

#[tokio::test]
async fn the_token_endpoint_issues_bearer_tokens_for_a_valid_assertion() {
    let f = start().await;
    let (status, body) = f.exchange(JWT_BEARER, &f.assertion(|_| {})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3600);
    assert!(body["access_token"].as_str().is_some_and(|t| t.len() > 20));
    assert_eq!(f.account["project_id"], f.mock.project_id);
    assert_eq!(f.account["token_uri"], f.mock.token_uri);
}

#[tokio::test]
async fn bad_assertions_are_refused_with_invalid_grant() {
    let f = start().await;
    let other_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256)
        .unwrap()
        .serialize_pem();
    let foreign = {
        let claims = json!({"iss": f.account["client_email"], "scope": FCM_SCOPE, "aud": f.account["token_uri"], "iat": now(), "exp": now() + 3600});
        jsonwebtoken::encode(
            &Header::new(Algorithm::RS256),
            &claims,
            &EncodingKey::from_rsa_pem(other_key.as_bytes()).unwrap(),
        )
        .unwrap()
    };
    let cases = [
        ("another key", foreign),
        (
            "wrong issuer",
            f.assertion(|c| c["iss"] = json!("someone@else.iam.gserviceaccount.com")),
        ),
        (
            "wrong audience",
            f.assertion(|c| c["aud"] = json!("https://oauth2.googleapis.com/token")),
        ),
        (
            "wrong scope",
            f.assertion(|c| c["scope"] = json!("https://www.googleapis.com/auth/cloud-platform")),
        ),
        (
            "stale",
            f.assertion(|c| {
                c["iat"] = json!(now() - 7200);
                c["exp"] = json!(now() - 3600);
            }),
        ),
        ("too long", f.assertion(|c| c["exp"] = json!(now() + 7200))),
    ];
    for (case, assertion) in cases {
        let (status, body) = f.exchange(JWT_BEARER, &assertion).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_grant")),
            "{case}: {body}"
        );
    }
    let (status, body) = f.exchange("client_credentials", &f.assertion(|_| {})).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("unsupported_grant_type"))
    );
}

#[tokio::test]
async fn a_valid_message_is_accepted_over_http2_and_counted() {
    let f = start().await;
    let bearer = f.access_token().await;
    let response = f.send(&bearer, message(&token(1))).await;
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    let prefix = format!("projects/{}/messages/", f.mock.project_id);
    assert!(body["name"].as_str().unwrap().starts_with(&prefix), "{body}");
    let stats = common::stats(&f.client, &f.mock.control).await;
    assert_eq!(stats.accepted, 1);
}

#[tokio::test]
async fn http2_without_alpn_is_served_by_prior_knowledge() {
    let f = start().await;
    let bearer = f.access_token().await;
    let request = http::Request::builder()
        .method("POST")
        .uri(format!(
            "{}/v1/projects/{}/messages:send",
            f.mock.endpoint, f.mock.project_id
        ))
        .header("authorization", format!("Bearer {bearer}"))
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    let body = json!({"message": message(&token(1))}).to_string();
    let (status, answer) =
        common::send_without_alpn(&f.mock.endpoint, &f.mock.ca_file, request, body.into()).await;
    assert_eq!(status, http::StatusCode::OK, "answer: {answer:?}");
    let stats = common::stats(&f.client, &f.mock.control).await;
    assert_eq!(stats.accepted, 1);

    // The token endpoint also serves HTTP/1.1, so it tells by the first bytes.
    let token_uri = f.account["token_uri"].as_str().unwrap();
    let exchange = http::Request::builder()
        .method("POST")
        .uri(token_uri)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(())
        .unwrap();
    let form = format!(
        "grant_type={}&assertion={}",
        urlencode(JWT_BEARER),
        f.assertion(|_| {})
    );
    let origin = token_uri.split("/token").next().unwrap();
    let (status, answer) = common::send_without_alpn(origin, &f.mock.ca_file, exchange, form.into()).await;
    assert_eq!(status, http::StatusCode::OK, "answer: {answer:?}");
}

fn urlencode(text: &str) -> String {
    text.replace(':', "%3A")
}

#[tokio::test]
async fn requests_without_a_valid_bearer_token_are_401_and_other_projects_403() {
    let f = start().await;
    let (status, google_status, _) = google_error(f.send("ya29.forged", message(&token(1))).await).await;
    assert_eq!((status, google_status.as_str()), (401, "UNAUTHENTICATED"));
    let bearer = f.access_token().await;
    let (status, google_status, _) =
        google_error(f.send_as(&bearer, "someone-else", message(&token(1))).await).await;
    assert_eq!((status, google_status.as_str()), (403, "PERMISSION_DENIED"));
}

#[tokio::test]
async fn access_tokens_expire() {
    let f = start_with(Duration::from_secs(1)).await;
    let bearer = f.access_token().await;
    assert_eq!(f.send(&bearer, message(&token(1))).await.status(), StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (status, _, _) = google_error(f.send(&bearer, message(&token(1))).await).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn malformed_messages_are_invalid_argument() {
    let f = start().await;
    let bearer = f.access_token().await;
    let mut ttl = message(&token(1));
    ttl["android"]["ttl"] = json!(3600);
    let mut ttl_text = message(&token(1));
    ttl_text["android"]["ttl"] = json!("1h");
    let mut data = message(&token(1));
    data["data"]["count"] = json!(3);
    let mut priority = message(&token(1));
    priority["android"]["priority"] = json!("urgent");
    let mut unknown = message(&token(1));
    unknown["topic_name"] = json!("x");
    let mut large = message(&token(1));
    large["notification"]["body"] = json!("x".repeat(4100));
    let cases = [
        ("numeric ttl", ttl),
        ("ttl not in seconds", ttl_text),
        ("non-string data", data),
        ("unknown priority", priority),
        ("unknown field", unknown),
        ("too large", large),
        ("no token", json!({"notification": {"title": "t"}})),
        ("malformed token", message("not a token")),
    ];
    for (case, message) in cases {
        let got = google_error(f.send(&bearer, message).await).await;
        assert_eq!(
            got,
            (400, "INVALID_ARGUMENT".into(), Some("INVALID_ARGUMENT".into())),
            "{case}"
        );
    }
}

#[tokio::test]
async fn a_message_without_a_uuid_notification_id_is_invalid_argument_naming_it() {
    let f = start().await;
    let bearer = f.access_token().await;
    let mut missing = message(&token(1));
    missing["data"].as_object_mut().unwrap().remove("notification_id");
    let mut no_data = message(&token(1));
    no_data.as_object_mut().unwrap().remove("data");
    let mut not_uuid = message(&token(1));
    not_uuid["data"]["notification_id"] = json!("42");
    for (case, message) in [
        ("missing", missing),
        ("no data", no_data),
        ("not a uuid", not_uuid),
    ] {
        let response = f.send(&bearer, message).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{case}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["message"], MISSING_NOTIFICATION_ID, "{case}");
        assert_eq!(body["error"]["status"], "INVALID_ARGUMENT", "{case}");
    }
    assert_eq!(f.mock.state.accounting.stats().accepted, 0);
    assert_eq!(f.send(&bearer, message(&token(1))).await.status(), StatusCode::OK);
    let kept = f.mock.state.received_by(&token(1)).expect("the message is kept");
    assert_eq!(kept.json()["message"]["data"]["notification_id"], NOTIFICATION_ID);
}

#[tokio::test]
async fn faults_answer_like_google() {
    let f = start().await;
    let bearer = f.access_token().await;
    f.faults(FaultConfig {
        dead: vec![token(2)],
        invalid: vec![token(3)],
        foreign: vec![token(4)],
        ..FaultConfig::default()
    })
    .await;
    let expect = [
        (2, 404, "NOT_FOUND", "UNREGISTERED"),
        (3, 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
        (4, 403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH"),
    ];
    for (n, status, google_status, code) in expect {
        let got = google_error(f.send(&bearer, message(&token(n))).await).await;
        assert_eq!(
            got,
            (status, google_status.into(), Some(code.into())),
            "token {n}"
        );
    }

    let rates = [
        (503u16, 503, "UNAVAILABLE", "UNAVAILABLE", true),
        (500, 500, "INTERNAL", "INTERNAL", false),
        (401, 401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR", false),
        (429, 429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", true),
    ];
    for (injected, status, google_status, code, retry_after) in rates {
        f.faults(FaultConfig {
            error_rates: [(injected, 1.0)].into(),
            retry_after_s: Some(7),
            ..FaultConfig::default()
        })
        .await;
        let response = f.send(&bearer, message(&token(1))).await;
        let header = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(header.as_deref(), retry_after.then_some("7"), "{code}");
        let got = google_error(response).await;
        assert_eq!(got, (status, google_status.into(), Some(code.into())));
    }

    f.faults(FaultConfig {
        quota_per_minute: Some(2),
        ..FaultConfig::default()
    })
    .await;
    let mut limited = None;
    for _ in 0..3 {
        let response = f.send(&bearer, message(&token(1))).await;
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            let after: u64 = response.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            limited = Some((after, google_error(response).await.2));
        }
    }
    let (after, code) = limited.expect("the quota answers 429 past its limit");
    assert!((1..=60).contains(&after));
    assert_eq!(code.as_deref(), Some("QUOTA_EXCEEDED"));
}

#[tokio::test]
async fn http1_is_refused_on_the_send_endpoint_but_not_on_the_token_endpoint() {
    let f = start().await;
    let http1 = common::client(&f.mock.ca_file, true);
    let send = http1
        .post(format!(
            "{}/v1/projects/{}/messages:send",
            f.mock.endpoint, f.mock.project_id
        ))
        .body("{}")
        .send()
        .await;
    assert!(
        send.is_err(),
        "HTTP/1.1 must not reach the send endpoint: {send:?}"
    );
    let token = http1
        .post(f.account["token_uri"].as_str().unwrap())
        .form(&[("grant_type", JWT_BEARER), ("assertion", &f.assertion(|_| {}))])
        .send()
        .await
        .unwrap();
    assert_eq!(token.version(), reqwest::Version::HTTP_11);
    assert_eq!(token.status(), StatusCode::OK);
    assert_eq!(
        common::max_concurrent_streams(&f.mock.endpoint, &f.mock.ca_file).await,
        1000
    );
}
