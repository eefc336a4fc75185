//! Scheduling across sends, end to end over the real PostgreSQL, RabbitMQ
//! and the mock APNs / FCM: a small send overtakes a big one of its lane,
//! an urgent send overtakes a bulk one, and nothing is lost or pushed
//! twice by the reordering. These assert the order of completion, not
//! times (the figures are `clarion-bench overtake`'s).

use std::time::Duration;

use clarion_load_tests::mocks::FaultConfig;
use clarion_load_tests::testkit::{Cluster, ClusterOptions, Device, seed_devices};
use clarion_proto::Platform;
use reqwest::StatusCode;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(120);
/// Devices of the big send: ~4 s of pushing at the throttled rate below.
const BIG: u64 = 16_000;

/// Small jobs and a small budget, so the big send is released piece by
/// piece; slow mocks (20 ms a push, 40 streams per platform: ~2,000
/// pushes/s each), so it runs for seconds.
async fn cluster() -> Cluster {
    let cluster = Cluster::start(ClusterOptions {
        coordinator: vec![
            "--tokens-per-job=500".into(),
            "--schedule-min-tokens=1000".into(),
            "--schedule-ahead-ms=500".into(),
        ],
        harvester: vec!["--batch-size=100".into()],
        harvesters: 1,
        dispatcher: vec![
            "--dispatch-batch-workers=2".into(),
            "--dispatch-streams-per-batch=20".into(),
        ],
        dispatchers: true,
        ..ClusterOptions::default()
    })
    .await;
    for platform in Platform::ALL {
        cluster.mocks().state(platform).faults.set(FaultConfig {
            latency_ms: 20.0,
            ..FaultConfig::default()
        });
    }
    cluster
}

/// Seeds `count` devices numbered from `first` on `topic` and warms the
/// planner's view of its size.
async fn seed(cluster: &Cluster, topic: &str, first: u64, count: u64) {
    let devices: Vec<Device> = (first..first + count)
        .map(|n| Device::alternating(n, &[topic]))
        .collect();
    seed_devices(&cluster.sql().await, &devices)
        .await
        .expect("seeding");
    cluster.wait_for_topic_size(topic, count, WAIT).await;
}

async fn send(cluster: &Cluster, body: Value) -> String {
    let (status, accepted) = cluster.send(&body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    accepted["id"].as_str().expect("an id").to_owned()
}

/// Waits until the mocks have accepted at least `pushes` in all.
async fn wait_for_pushes(cluster: &Cluster, pushes: u64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let accepted: u64 = Platform::ALL
            .iter()
            .map(|p| cluster.mocks().state(*p).accounting.stats().accepted)
            .sum();
        if accepted >= pushes {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {accepted} pushes arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asserts `first` completed while `second` was still going, then that
/// both reached every device exactly once.
async fn assert_overtook(cluster: &Cluster, first: &str, second: &str, audiences: u64) {
    let done = cluster.wait_until_settled(first, WAIT).await;
    assert_eq!(done["status"], "complete", "{done}");
    let other = cluster.status(second).await;
    assert!(
        other["completed_at"].is_null(),
        "{second} finished before {first}: {other}"
    );
    let other = cluster.wait_until_settled(second, WAIT).await;
    assert_eq!(other["status"], "complete", "{other}");
    let (mut unique, mut duplicates) = (0, 0);
    for platform in Platform::ALL {
        let stats = cluster.mocks().state(platform).accounting.stats();
        unique += stats.unique_tokens;
        duplicates += stats.duplicate_pushes;
    }
    assert_eq!(unique, audiences, "every device of both sends got its push");
    assert_eq!(duplicates, 0, "the reordering pushed nothing twice");
    for status in [&done, &other] {
        assert_eq!(
            status["delivery"]["ios"]["sent"].as_u64().unwrap_or(0)
                + status["delivery"]["android"]["sent"].as_u64().unwrap_or(0),
            status["audience"]["total"].as_u64().unwrap_or(u64::MAX),
            "{status}"
        );
    }
}

#[actix_web::test]
async fn a_small_send_overtakes_a_big_one_of_the_same_lane() {
    let cluster = cluster().await;
    seed(&cluster, "big", 0, BIG).await;
    seed(&cluster, "small", 1_000_000, 100).await;

    let big = send(&cluster, json!({"topics": ["big"], "body": "morning briefing"})).await;
    wait_for_pushes(&cluster, 1_000).await;
    let small = send(&cluster, json!({"topics": ["small"], "body": "breaking"})).await;

    assert_overtook(&cluster, &small, &big, BIG + 100).await;
    assert_eq!(cluster.status(&small).await["lane"], "standard");
    cluster.stop().await;
}

#[actix_web::test]
async fn an_urgent_send_overtakes_a_bulk_one_whatever_their_sizes() {
    let cluster = cluster().await;
    seed(&cluster, "briefing", 0, BIG).await;
    seed(&cluster, "breaking", 1_000_000, 3_000).await;

    let bulk = send(
        &cluster,
        json!({"topics": ["briefing"], "body": "morning briefing", "lane": "bulk"}),
    )
    .await;
    wait_for_pushes(&cluster, 1_000).await;
    // Sent as standard it would wait behind nothing bigger than itself
    // anyway; urgent it must also beat a bulk send with less left.
    let urgent = send(
        &cluster,
        json!({"topics": ["breaking"], "body": "breaking", "lane": "urgent"}),
    )
    .await;

    assert_overtook(&cluster, &urgent, &bulk, BIG + 3_000).await;
    let status = cluster.status(&urgent).await;
    assert_eq!(status["lane"], "urgent", "{status}");
    assert_eq!(cluster.status(&bulk).await["lane"], "bulk");
    cluster.stop().await;
}

#[actix_web::test]
async fn an_unknown_lane_is_refused() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    let (status, body) = cluster
        .send(&json!({"topics": ["t"], "body": "x", "lane": "express"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("urgent, standard, bulk"),
        "the answer names the lanes: {body}"
    );
    // The same id with another lane is another notification: a conflict.
    let id = uuid::Uuid::now_v7();
    let (first, _) = cluster
        .send(&json!({"id": id, "topics": ["t"], "body": "x", "lane": "bulk"}))
        .await;
    assert_eq!(first, StatusCode::ACCEPTED);
    let (again, body) = cluster
        .send(&json!({"id": id, "topics": ["t"], "body": "x", "lane": "urgent"}))
        .await;
    assert_eq!(again, StatusCode::CONFLICT, "{body}");
    cluster.stop().await;
}
