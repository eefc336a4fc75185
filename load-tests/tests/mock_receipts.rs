//! The phones behind the mocks, against a small local recorder standing in
//! for Clarion's `POST /api/v1/receipts`: every accepted push (and only
//! those) gets its receipts, in batches of at most 500, with the key, the
//! notification id and `at` where the settings put it; 503 with
//! `Retry-After` is retried after the wait, another 4xx is counted and not
//! retried; offline phones and a full queue are counted.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use clarion_dispatcher::apns::token::ProviderToken;
use clarion_load_tests::mocks::phones::DelayDistribution;
use clarion_load_tests::mocks::server::{Listener, serve_plain};
use clarion_load_tests::mocks::{
    ApnsMock, ApnsMockConfig, FaultConfig, FcmMock, FcmMockConfig, ReceiptStats, ReceiptsConfig,
};
use futures::StreamExt;
use http_body_util::BodyExt;
use hyper::Response;
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

#[allow(
    dead_code,
    reason = "helpers shared with the other mock tests; this one needs two"
)]
mod common;

const KEY: &str = "app-k3y";
/// Longest wait for the phones to settle (they report within a second here).
const SETTLE_WITHIN: Duration = Duration::from_secs(60);

/// One request the recorder got.
struct Recorded {
    arrived: DateTime<Utc>,
    authorization: Option<String>,
    receipts: Vec<Value>,
}

/// An answer: status and `Retry-After`.
type Answer = (u16, Option<&'static str>);

/// A stand-in for the receipts API: records every request and answers
/// from a script, then with the standing answer (202 with the count at
/// first).
struct Recorder {
    url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    script: Arc<Mutex<(VecDeque<Answer>, Answer)>>,
    _listener: Listener,
}

impl Recorder {
    async fn start() -> Self {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new((VecDeque::new(), (202, None))));
        let (recorded, scripted) = (requests.clone(), script.clone());
        let listener = serve_plain(SocketAddr::from(([127, 0, 0, 1], 0)), move |request| {
            let (recorded, scripted) = (recorded.clone(), scripted.clone());
            async move {
                let authorization = request
                    .headers()
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let body = request.into_body().collect().await.unwrap().to_bytes();
                let body: Value = serde_json::from_slice(&body).unwrap();
                let receipts = body["receipts"].as_array().cloned().unwrap_or_default();
                let count = receipts.len();
                recorded.lock().unwrap().push(Recorded {
                    arrived: Utc::now(),
                    authorization,
                    receipts,
                });
                let (status, retry_after) = {
                    let mut script = scripted.lock().unwrap();
                    let standing = script.1;
                    script.0.pop_front().unwrap_or(standing)
                };
                let mut answer = Response::builder().status(status);
                if let Some(seconds) = retry_after {
                    answer = answer.header("retry-after", seconds);
                }
                let body = json!({"accepted": count, "duplicates": 0, "ignored": 0});
                answer.body(Bytes::from(body.to_string())).unwrap()
            }
        })
        .await
        .unwrap();
        Self {
            url: format!("http://{}/api/v1/receipts", listener.addr),
            requests,
            script,
            _listener: listener,
        }
    }

    fn answer_next(&self, status: u16, retry_after: Option<&'static str>) {
        self.script.lock().unwrap().0.push_back((status, retry_after));
    }

    fn answer_from_now_on(&self, status: u16) {
        self.script.lock().unwrap().1 = (status, None);
    }

    /// Every receipt received, in order.
    fn receipts(&self) -> Vec<Value> {
        let requests = self.requests.lock().unwrap();
        requests.iter().flat_map(|r| r.receipts.iter().cloned()).collect()
    }
}

/// Phones that all report after exactly `receive_ms` and open `open_ms`
/// later (spread 0), flushing every 50 ms.
fn phones(url: &str, receive_ms: u64, open_share: f64, open_ms: u64) -> ReceiptsConfig {
    let exactly = |ms| DelayDistribution {
        median: Duration::from_millis(ms),
        spread: 0.0,
    };
    ReceiptsConfig {
        online_share: 1.0,
        receive_delay: exactly(receive_ms),
        open_share,
        open_delay: exactly(open_ms),
        flush_every: Duration::from_millis(50),
        ..ReceiptsConfig::new(url, KEY)
    }
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(kind: &str) -> TempDir {
    TempDir(std::env::temp_dir().join(format!("clarion-{kind}-{}", Uuid::new_v4().simple())))
}

/// A mock APNs whose phones report as `receipts` says, and a client for it.
struct Apns {
    mock: ApnsMock,
    client: reqwest::Client,
    token: ProviderToken,
    _dir: TempDir,
}

impl Apns {
    async fn start(receipts: ReceiptsConfig) -> Self {
        let dir = temp_dir("apns-receipts");
        let mut config = ApnsMockConfig::local(dir.0.clone());
        config.receipts = Some(receipts);
        let mock = ApnsMock::start(config).await.expect("mock starts");
        let token = ProviderToken::new(
            &mock.key_file,
            &mock.key_id,
            &mock.team_id,
            Duration::from_secs(2400),
        )
        .expect("a provider token");
        let client = common::client(&mock.ca_file, false);
        Self {
            mock,
            client,
            token,
            _dir: dir,
        }
    }

    /// Pushes `notification_id` to each of `devices`, 50 at a time; the
    /// statuses in order.
    async fn push_all(&self, notification_id: Uuid, devices: &[String]) -> Vec<StatusCode> {
        let body = json!({"aps": {"alert": "News"}, "notification_id": notification_id}).to_string();
        futures::stream::iter(devices)
            .map(|device| {
                self.client
                    .post(format!("{}/3/device/{device}", self.mock.endpoint))
                    .header("authorization", self.token.header())
                    .header("apns-topic", &self.mock.bundle_id)
                    .body(body.clone())
                    .send()
            })
            .buffered(50)
            .map(|response| response.expect("a push answered").status())
            .collect()
            .await
    }

    fn receipts(&self) -> ReceiptStats {
        self.mock.state.receipts().expect("receipts are on")
    }

    /// Waits until the phones have nothing left to send and `done` holds.
    async fn settled(&self, done: impl Fn(&ReceiptStats) -> bool) -> ReceiptStats {
        let deadline = tokio::time::Instant::now() + SETTLE_WITHIN;
        loop {
            let stats = self.receipts();
            if stats.settled() && done(&stats) {
                return stats;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the phones did not settle: {stats:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn apns_tokens(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{i:064x}")).collect()
}

fn at(receipt: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(receipt["at"].as_str().expect("an `at`"))
        .expect("RFC 3339")
        .with_timezone(&Utc)
}

#[tokio::test]
async fn every_accepted_push_gets_one_received_and_one_opened_in_batches_of_at_most_500() {
    let recorder = Recorder::start().await;
    let apns = Apns::start(phones(&recorder.url, 300, 1.0, 200)).await;
    let devices = apns_tokens(1200);
    let dead = devices[7].clone();
    apns.mock.state.faults.set(FaultConfig {
        dead: vec![dead.clone()],
        ..FaultConfig::default()
    });
    let id = Uuid::new_v4();
    let before = Utc::now();
    let statuses = apns.push_all(id, &devices).await;
    let after = Utc::now();
    let accepted = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert_eq!(accepted, 1199, "all but the dead token");

    let stats = apns.settled(|s| s.received + s.opened == 2 * 1199).await;
    assert_eq!(
        (
            stats.scheduled,
            stats.silent,
            stats.dropped,
            stats.rejected,
            stats.failed
        ),
        (1199, 0, 0, 0, 0),
        "{stats:?}"
    );
    assert_eq!((stats.received, stats.opened), (1199, 1199));
    assert_eq!(stats.server_accepted, 2 * 1199);
    // The control API reports the same.
    let served = common::stats(&apns.client, &apns.mock.control).await;
    assert_eq!(served.receipts, Some(stats));

    let requests = recorder.requests.lock().unwrap();
    assert!(
        requests
            .iter()
            .all(|r| !r.receipts.is_empty() && r.receipts.len() <= 500)
    );
    assert_eq!(recorder_total(&requests), 2 * 1199, "nothing sent twice");
    let bearer = format!("Bearer {KEY}");
    assert!(
        requests
            .iter()
            .all(|r| r.authorization.as_deref() == Some(bearer.as_str()))
    );
    let mut seen: HashMap<(String, String), HashMap<String, DateTime<Utc>>> = HashMap::new();
    for request in requests.iter() {
        for receipt in &request.receipts {
            assert!(
                at(receipt) <= request.arrived,
                "never reported before it happened"
            );
            let device = (
                receipt["notification_id"].as_str().unwrap().to_owned(),
                receipt["token"].as_str().unwrap().to_owned(),
            );
            let event = receipt["event"].as_str().unwrap().to_owned();
            let twice = seen.entry(device).or_default().insert(event, at(receipt));
            assert!(twice.is_none(), "one receipt of each kind: {receipt}");
        }
    }
    assert_eq!(seen.len(), 1199);
    let millisecond = chrono::Duration::milliseconds(1);
    for ((notification, token), events) in &seen {
        assert_eq!(notification, &id.to_string());
        assert_ne!(token, &dead, "a refused push gets no receipt");
        let (received, opened) = (events["received"], events["opened"]);
        // Spread 0: every phone reports 300 ms after its push was accepted
        // and opens 200 ms after that (`at` is written to the millisecond).
        let delay = chrono::Duration::milliseconds(300);
        assert!(received >= before + delay - millisecond, "{received} {before}");
        assert!(received <= after + delay, "{received} {after}");
        assert_eq!(opened - received, chrono::Duration::milliseconds(200));
    }
}

#[tokio::test]
async fn a_503_with_retry_after_is_retried_after_the_wait_and_a_400_is_not() {
    let recorder = Recorder::start().await;
    let mut config = phones(&recorder.url, 10, 0.0, 10);
    // One request at a time: the retry is the next request.
    config.max_in_flight = 1;
    let apns = Apns::start(config).await;
    recorder.answer_next(503, Some("1"));
    let first = apns.push_all(Uuid::new_v4(), &apns_tokens(10)).await;
    assert!(first.iter().all(|s| *s == StatusCode::OK));
    let stats = apns.settled(|s| s.received == 10).await;
    assert_eq!(
        (stats.retries, stats.opened, stats.failed),
        (1, 0, 0),
        "{stats:?}"
    );
    let sent_before = {
        let requests = recorder.requests.lock().unwrap();
        assert_eq!(requests.len() as u64, stats.requests);
        assert_eq!(requests[0].receipts, requests[1].receipts, "the same batch again");
        let waited = requests[1].arrived - requests[0].arrived;
        assert!(
            waited >= chrono::Duration::milliseconds(1000),
            "Retry-After honoured: {waited}"
        );
        let resent = requests[0].receipts.len();
        assert_eq!(recorder_total(&requests), 10 + resent);
        requests.len()
    };

    recorder.answer_from_now_on(400);
    apns.push_all(Uuid::new_v4(), &apns_tokens(5)).await;
    let stats = apns.settled(|s| s.rejected == 5).await;
    assert_eq!(
        (stats.retries, stats.received, stats.failed),
        (1, 10, 0),
        "not retried: {stats:?}"
    );
    let requests = recorder.requests.lock().unwrap();
    assert_eq!(requests.len() as u64, stats.requests);
    let refused: usize = requests[sent_before..].iter().map(|r| r.receipts.len()).sum();
    assert_eq!(refused, 5, "each refused receipt sent once");
}

fn recorder_total(requests: &[Recorded]) -> usize {
    requests.iter().map(|r| r.receipts.len()).sum()
}

#[tokio::test]
async fn offline_phones_and_a_full_queue_are_counted() {
    let recorder = Recorder::start().await;
    let mut config = phones(&recorder.url, 60_000, 0.0, 10);
    config.online_share = 0.5;
    config.max_pending = 20;
    let apns = Apns::start(config).await;
    apns.push_all(Uuid::new_v4(), &apns_tokens(100)).await;
    let stats = apns.receipts();
    assert!((25..75).contains(&stats.silent), "about half offline: {stats:?}");
    assert_eq!((stats.scheduled, stats.pending), (20, 20), "{stats:?}");
    assert_eq!(stats.silent + stats.scheduled + stats.dropped, 100);
    assert!(!stats.settled(), "receipts a minute away wait");
    assert!(recorder.receipts().is_empty());
    // Reset forgets them.
    let reset = apns
        .client
        .post(format!("{}/reset", apns.mock.control))
        .send()
        .await
        .unwrap();
    assert_eq!(reset.status(), StatusCode::NO_CONTENT);
    assert_eq!(apns.receipts(), ReceiptStats::default());
}

#[tokio::test]
async fn the_fcm_mock_reports_the_messages_it_accepted_with_their_ids() {
    let recorder = Recorder::start().await;
    let dir = temp_dir("fcm-receipts");
    let mut config = FcmMockConfig::local(dir.0.clone());
    config.receipts = Some(phones(&recorder.url, 10, 1.0, 10));
    let mock = FcmMock::start(config).await.expect("mock starts");
    let (_, auth) =
        clarion_dispatcher::fcm::auth::from_credentials(&mock.credentials_file, Some(&mock.ca_file))
            .await
            .expect("an FCM auth");
    let authorization = auth.header().await.expect("an access token");
    let client = common::client(&mock.ca_file, false);
    let id = Uuid::new_v4();
    let tokens: Vec<String> = (0..5)
        .map(|n| format!("fcm{n:012}:APA91b{}", "Ab-_9".repeat(24)))
        .collect();
    for token in &tokens {
        let response = client
            .post(format!(
                "{}/v1/projects/{}/messages:send",
                mock.endpoint, mock.project_id
            ))
            .header("authorization", authorization.clone())
            .json(
                &json!({"message": {"token": token, "notification": {"body": "News"},
                                      "data": {"notification_id": id}}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let deadline = tokio::time::Instant::now() + SETTLE_WITHIN;
    let stats = loop {
        let stats = mock.state.receipts().expect("receipts are on");
        if stats.settled() && stats.received + stats.opened == 10 {
            break stats;
        }
        assert!(tokio::time::Instant::now() < deadline, "{stats:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((stats.received, stats.opened), (5, 5));
    let mut reported: Vec<(String, String)> = recorder
        .receipts()
        .iter()
        .map(|r| {
            (
                r["token"].as_str().unwrap().to_owned(),
                r["event"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    reported.sort();
    let mut expected: Vec<(String, String)> = tokens
        .iter()
        .flat_map(|t| {
            [
                (t.clone(), "opened".to_owned()),
                (t.clone(), "received".to_owned()),
            ]
        })
        .collect();
    expected.sort();
    assert_eq!(reported, expected);
    assert!(
        recorder
            .receipts()
            .iter()
            .all(|r| r["notification_id"] == id.to_string())
    );
}
