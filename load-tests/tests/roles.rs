//! An api-only and a control-only coordinator on one database and broker,
//! as the Helm chart deploys them (real processes, with a harvester and a
//! dispatcher per platform against the mock APNs and FCM): the phones'
//! traffic — registrations, receipts, status reads — goes to the api one,
//! sends to the control one; each refuses the other's routes with 421
//! `wrong-role`; the api one needs no broker and runs no loop: its metrics
//! of the relay, the schedule and the report consumer stay at zero while
//! the control one's move, and a scheduled send waits for a control
//! coordinator to fire it.
//!
//! The services run as real processes: the binaries `cargo build --workspace
//! --bins` puts beside this test (`./scripts/test` builds them first).

use std::time::{Duration, Instant};

use clarion_load_tests::local_cluster::{APP_KEY, DESK_KEY, LocalCluster, LocalClusterConfig, Member};
use clarion_load_tests::testkit::{Device, Mocks};
use clarion_proto::Platform;
use clarion_runtime::testing::{TestDatabase, TestNamespace};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

/// Devices per platform, all following [`TOPIC`] and reporting receipts.
const PER_PLATFORM: u64 = 20;
const TOPIC: &str = "roles/test";
/// Generous for a busy two-core box.
const PATIENCE: Duration = Duration::from_secs(90);

/// One coordinator's HTTP API.
struct Endpoint {
    base: String,
    http: Client,
}

impl Endpoint {
    async fn call(&self, method: Method, path: &str, key: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn status(&self, id: &str) -> Value {
        let (code, status) = self
            .call(
                Method::GET,
                &format!("/api/v1/notifications/{id}"),
                DESK_KEY,
                None,
            )
            .await;
        assert_eq!(code, StatusCode::OK, "{status}");
        status
    }

    /// Polls the status until `done` holds; panics with the last one after [`PATIENCE`].
    async fn wait_for(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let status = self.status(id).await;
            if done(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "{id} never got there: {status}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn metrics(&self) -> String {
        let response = self.http.get(format!("{}/metrics", self.base)).send().await;
        response.expect("metrics").text().await.expect("metrics text")
    }
}

/// The sum of the samples of `metric` in a Prometheus text exposition;
/// `None` when it has none.
fn samples(exposition: &str, metric: &str) -> Option<f64> {
    let values: Vec<f64> = exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            line.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// Asserts a 421 `wrong-role` problem that names `serving`.
fn assert_wrong_role(code: StatusCode, problem: &Value, serving: &str) {
    assert_eq!(code, StatusCode::MISDIRECTED_REQUEST, "{problem}");
    assert_eq!(problem["type"], "urn:clarion:problem:wrong-role", "{problem}");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(&format!("role `{serving}`")), "{problem}");
}

fn every_device() -> Vec<Device> {
    (0..PER_PLATFORM)
        .flat_map(|n| [Device::ios(n, &[TOPIC]), Device::android(n, &[TOPIC])])
        .collect()
}

fn delivered(mocks: &Mocks, platform: Platform) -> u64 {
    mocks.state(platform).accounting.stats().unique_tokens
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_and_a_control_coordinator_share_one_database_and_broker() {
    let db = TestDatabase::create().await;
    let namespace = TestNamespace::new();
    let mocks = Mocks::start().await;
    let logs = std::env::temp_dir().join(format!("clarion-roles-{}", namespace.settings.namespace));
    let config = LocalClusterConfig {
        database_url: db.url.clone(),
        amqp_url: namespace.settings.url.clone(),
        namespace: namespace.settings.namespace.clone(),
        harvesters: 1,
        coordinator_env: vec![("CLARION_ROLE".into(), "control".into())],
        harvester_env: Vec::new(),
        dispatcher_env: mocks.dispatcher_env(),
        log_dir: logs.clone(),
    };
    let mut cluster = LocalCluster::start(&config).await.expect("the cluster starts");
    // The api coordinator is pointed at a broker nothing listens on: it
    // opens no link, and is ready all the same.
    let api_env = [
        ("CLARION_ROLE".to_owned(), "api".to_owned()),
        (
            "CLARION_AMQP_URL".to_owned(),
            "amqp://guest:guest@127.0.0.1:1/%2f".to_owned(),
        ),
    ];
    let (mut api_process, api_base) = cluster
        .start_coordinator("coordinator-api", &api_env)
        .await
        .expect("the api coordinator starts without a broker");
    let api = Endpoint {
        base: api_base,
        http: cluster.http.clone(),
    };
    let control = Endpoint {
        base: cluster.base.clone(),
        http: cluster.http.clone(),
    };

    // Registrations go to the api coordinator; the control one refuses them.
    for device in every_device() {
        let body = json!({"platform": device.platform.as_str(), "topics": [TOPIC], "receipts": true});
        let path = format!("/api/v1/registrations/{}", device.token);
        let (code, answer) = api.call(Method::PUT, &path, APP_KEY, Some(body)).await;
        assert!(code.is_success(), "{code} {answer}");
    }
    let first = Device::ios(0, &[TOPIC]).token;
    let path = format!("/api/v1/registrations/{first}");
    let (code, registration) = api.call(Method::GET, &path, APP_KEY, None).await;
    assert_eq!(code, StatusCode::OK, "{registration}");
    assert_eq!(registration["topics"], json!([TOPIC]), "{registration}");
    let (code, problem) = control.call(Method::GET, &path, APP_KEY, None).await;
    assert_wrong_role(code, &problem, "api");

    // Sends go to the control coordinator; the api one refuses them.
    let send = json!({"topics": [TOPIC], "body": "two roles, one cluster"});
    let (code, problem) = api
        .call(
            Method::POST,
            "/api/v1/notifications",
            DESK_KEY,
            Some(send.clone()),
        )
        .await;
    assert_wrong_role(code, &problem, "control");
    let (code, accepted) = control
        .call(Method::POST, "/api/v1/notifications", DESK_KEY, Some(send))
        .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{accepted}");
    let id = accepted["id"].as_str().expect("an id").to_owned();

    // Delivered through the control coordinator's relay and report
    // consumer; its status read on the api coordinator.
    let status = api.wait_for(&id, |s| !s["completed_at"].is_null()).await;
    assert_eq!(status["status"], "complete", "{status}");
    // The audience: iPhones and Android phones (no browsers).
    for platform in [Platform::Ios, Platform::Android] {
        let sent = status["delivery"][platform.as_str()]["sent"].as_u64();
        assert_eq!(sent, Some(PER_PLATFORM), "{platform}: {status}");
        assert_eq!(
            delivered(&mocks, platform),
            PER_PLATFORM,
            "{platform} devices reached"
        );
    }

    // Receipts go to the api coordinator and count in the status it serves.
    let receipts: Vec<Value> = every_device()
        .iter()
        .take(10)
        .map(|device| json!({"notification_id": id, "token": device.token, "event": "received"}))
        .collect();
    let (code, answer) = api
        .call(
            Method::POST,
            "/api/v1/receipts",
            APP_KEY,
            Some(json!({"receipts": receipts})),
        )
        .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answer["accepted"], 10, "{answer}");
    let status = api.wait_for(&id, |s| s["device"]["received"] == 10).await;
    assert_eq!(status["device"]["received"], 10, "{status}");

    // The loops ran in the control process only.
    let control_metrics = control.metrics().await;
    let published = samples(&control_metrics, "clarion_coordinator_jobs_published_total");
    assert!(
        published.is_some_and(|jobs| jobs >= 1.0),
        "control published no job"
    );
    let api_metrics = api.metrics().await;
    for loop_metric in [
        "clarion_coordinator_jobs_published_total",
        "clarion_coordinator_outbox_waiting_jobs",
        "clarion_coordinator_schedule_budget_tokens",
        "clarion_coordinator_reports_total",
        "clarion_amqp_queue_messages",
    ] {
        // Declared metrics may show 0; a loop that ran would have moved them.
        let value = samples(&api_metrics, loop_metric).unwrap_or(0.0);
        assert_eq!(value, 0.0, "{loop_metric} on the api coordinator");
    }
    assert!(
        samples(&api_metrics, "clarion_write_batches_total").is_some_and(|batches| batches >= 1.0),
        "the api coordinator committed the registrations and receipts"
    );

    // A scheduled send fires only while a control coordinator runs.
    let lead = Duration::from_secs(15);
    let send_at = chrono::Utc::now() + lead;
    let scheduled = json!({"topics": [TOPIC], "body": "later", "send_at": send_at.to_rfc3339()});
    let (code, accepted) = control
        .call(Method::POST, "/api/v1/notifications", DESK_KEY, Some(scheduled))
        .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{accepted}");
    let later = accepted["id"].as_str().expect("an id").to_owned();
    cluster.coordinator.stop();
    assert!(
        chrono::Utc::now() < send_at,
        "the control coordinator took longer than {lead:?} to stop; the test proves nothing"
    );
    // Watched through the api coordinator past its time, with a dozen of
    // the scheduler's 250 ms rounds to spare: still scheduled.
    let watch_until = send_at + chrono::Duration::seconds(3);
    while chrono::Utc::now() < watch_until {
        let status = api.status(&later).await;
        assert_eq!(
            status["status"], "scheduled",
            "fired without a control coordinator: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cluster
        .restart(Member::Coordinator)
        .await
        .expect("the control coordinator starts again");
    let status = api.wait_for(&later, |s| !s["completed_at"].is_null()).await;
    assert_eq!(status["status"], "complete", "{status}");
    // The audience: iPhones and Android phones (no browsers).
    for platform in [Platform::Ios, Platform::Android] {
        let sent = status["delivery"][platform.as_str()]["sent"].as_u64();
        assert_eq!(sent, Some(PER_PLATFORM), "{platform}: {status}");
    }

    api_process.stop();
    cluster.stop();
    let _ = std::fs::remove_dir_all(&logs);
}
