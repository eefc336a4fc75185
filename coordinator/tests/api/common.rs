//! A coordinator started in-process on a free port with its own database.

use clap::Parser;
use clarion_coordinator::{Coordinator, Settings};
use clarion_runtime::testing::{TestDatabase, TestNamespace};
use reqwest::{Client, Method, RequestBuilder, Response, StatusCode};
use serde_json::{Value, json};

pub const REGISTER_KEY: &str = "app-k3y";
pub const SEND_KEY: &str = "desk-k3y";
pub const ADMIN_KEY: &str = "ops-k3y";

pub struct TestCoordinator {
    pub base: String,
    pub http: Client,
    pub db: TestDatabase,
    coordinator: Option<Coordinator>,
    /// The command line it was started with (a replica or a restart uses
    /// the same database and broker namespace).
    args: Vec<String>,
    _namespace: TestNamespace,
}

impl TestCoordinator {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Starts with extra command-line flags.
    pub async fn start_with(extra: &[&str]) -> Self {
        let keys = format!("{REGISTER_KEY}=register,{SEND_KEY}=send,{ADMIN_KEY}=admin");
        let mut args = vec![format!("--api-keys={keys}")];
        args.extend(extra.iter().map(|arg| arg.to_string()));
        Self::start_keyed(args).await
    }

    /// Starts with `args` and no keys but those `args` configure.
    pub async fn start_keyed(extra: Vec<String>) -> Self {
        let db = TestDatabase::create().await;
        let namespace = TestNamespace::new();
        let broker = namespace.settings.clone();
        let mut args = vec![
            "clarion-coordinator".to_owned(),
            "--http-addr=127.0.0.1:0".into(),
            "--http-workers=2".into(),
            format!("--database-url={}", db.url),
            "--database-pool-size=8".into(),
            // These tests change the database behind the coordinator's back
            // and read the status at once: no snapshot outlives a
            // millisecond. The interval itself is tested in status_reads.rs,
            // which passes its own.
            "--status-refresh-ms=1".into(),
            format!("--amqp-url={}", broker.url),
            format!("--amqp-namespace={}", broker.namespace),
        ];
        args.extend(extra);
        let coordinator = start_coordinator(&args).await;
        Self {
            base: format!("http://{}", coordinator.addr()),
            http: Client::new(),
            db,
            coordinator: Some(coordinator),
            args,
            _namespace: namespace,
        }
    }

    /// Another coordinator on the same database and broker namespace, as a
    /// second replica of a deployment runs.
    pub async fn replica(&self) -> Coordinator {
        start_coordinator(&self.args).await
    }

    /// Stops the coordinator, keeping its database; `restart` starts it again.
    pub async fn stop_coordinator(&mut self) {
        if let Some(coordinator) = self.coordinator.take() {
            coordinator.stop().await;
        }
    }

    /// Starts the coordinator again (on a new port) after `stop_coordinator`.
    pub async fn restart(&mut self) {
        self.stop_coordinator().await;
        let coordinator = start_coordinator(&self.args).await;
        self.base = format!("http://{}", coordinator.addr());
        self.coordinator = Some(coordinator);
    }

    pub fn request(&self, method: Method, path: &str, key: Option<&str>) -> RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    pub async fn put_registration(&self, token: &str, body: Value) -> Response {
        self.request(
            Method::PUT,
            &format!("/api/v1/registrations/{token}"),
            Some(REGISTER_KEY),
        )
        .json(&body)
        .send()
        .await
        .expect("request sent")
    }

    pub async fn get(&self, path: &str, key: &str) -> Response {
        self.request(Method::GET, path, Some(key))
            .send()
            .await
            .expect("request sent")
    }

    /// Sends a notification to `topics` with `key`.
    pub async fn send(&self, key: &str, topics: &[&str]) -> Response {
        self.request(Method::POST, "/api/v1/notifications", Some(key))
            .json(&json!({"topics": topics, "body": "Something happened"}))
            .send()
            .await
            .expect("request sent")
    }

    /// A SQL connection to the test database.
    pub async fn sql(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.db.url, tokio_postgres::NoTls)
            .await
            .expect("test connection to PostgreSQL");
        actix_web::rt::spawn(connection);
        client
    }

    pub async fn stop(mut self) {
        if let Some(coordinator) = self.coordinator.take() {
            coordinator.stop().await;
        }
    }
}

async fn start_coordinator(args: &[String]) -> Coordinator {
    let settings = Settings::try_parse_from(args).expect("valid test settings");
    clarion_coordinator::start(settings)
        .await
        .expect("coordinator starts")
}

/// The value of one series on `/metrics` (0 when absent). For the test
/// binaries that read process-wide counters one test at a time (the API
/// tests run in parallel and do not).
#[allow(dead_code)]
pub async fn metric(app: &TestCoordinator, series: &str) -> f64 {
    let text = app
        .request(Method::GET, "/metrics", None)
        .send()
        .await
        .expect("metrics answered")
        .text()
        .await
        .expect("metrics read");
    text.lines()
        .find(|line| line.starts_with(series) && line[series.len()..].starts_with(' '))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// A valid APNs token derived from `n`.
pub fn ios_token(n: u64) -> String {
    format!("{:016x}{:048x}", n, n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// A valid FCM token derived from `n`.
pub fn android_token(n: u64) -> String {
    format!("fcm{n:012}:APA91b{}", "Ab-_9".repeat(24))
}

pub fn registration(platform: &str, topics: &[&str]) -> Value {
    json!({"platform": platform, "topics": topics})
}

/// Asserts an RFC 9457 problem answer and returns its body.
pub async fn expect_problem(response: Response, status: StatusCode, kind: &str) -> Value {
    assert_eq!(response.status(), status, "status");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(content_type, "application/problem+json");
    let body: Value = response.json().await.expect("problem body is JSON");
    assert_eq!(body["type"], format!("urn:clarion:problem:{kind}"), "{body}");
    assert_eq!(body["status"], status.as_u16());
    assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()), "{body}");
    body
}

/// Sends a notification to `topic` and returns its id and the shard jobs
/// it was split into (at least one: the topic must have subscribers).
pub async fn send_planned(app: &TestCoordinator, topic: &str) -> (uuid::Uuid, u32) {
    let response = app
        .request(Method::POST, "/api/v1/notifications", Some(SEND_KEY))
        .json(&json!({"topics": [topic], "body": "planned"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let body: Value = response.json().await.unwrap();
    let id: uuid::Uuid = body["id"].as_str().and_then(|id| id.parse().ok()).expect("an id");
    let status = status_of(app, id).await;
    let jobs = status["jobs"]["planned"].as_u64().expect("jobs planned") as u32;
    assert!(jobs >= 1, "{status}");
    (id, jobs)
}

/// `GET /api/v1/notifications/{id}`, which must answer 200.
pub async fn status_of(app: &TestCoordinator, id: uuid::Uuid) -> Value {
    let response = app.get(&format!("/api/v1/notifications/{id}"), SEND_KEY).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}
