//! A rolling restart of the three-node RabbitMQ cluster
//! (`testkit::rabbit_cluster`) under a send: each node in turn, once
//! stopping it leaves every quorum queue a majority, is stopped cleanly and
//! started again, while the mocks answer slowly so the send is still under
//! way at the third restart; then the mocks speed up. Counted per
//! platform: every device delivered (the distinct tokens and their
//! digest), lost 0, duplicates within what three restarts can have in
//! flight, each report counted once, the notification complete.

use std::time::{Duration, Instant};

use clarion_load_tests::mocks::FaultConfig;
use clarion_load_tests::testkit::node_loss::{IN_FLIGHT, assert_every_device_once, small_batch_options};
use clarion_load_tests::testkit::rabbit_cluster::RabbitCluster;
use clarion_load_tests::testkit::{Cluster, Device, seed_devices};
use clarion_proto::Platform;
use serde_json::json;

/// Devices of the send, half of them on each platform.
const DEVICES: u64 = 2000;
const NODES: u64 = 3;
/// While the nodes restart the mocks answer in this long: about 20
/// pushes a second per platform, so the send outlasts the three restarts.
const SLOW_MS: f64 = 500.0;
const SETTLE: Duration = Duration::from_secs(120);

#[actix_web::test]
async fn a_send_survives_a_rolling_restart_of_all_three_nodes() {
    let mut rabbit = RabbitCluster::start(3).await.expect("the broker cluster starts");
    let options = small_batch_options(rabbit.servers());
    let cluster = Cluster::start(options).await;
    rabbit
        .check_replicated(&format!("{}.", cluster.broker.namespace))
        .await
        .expect("every quorum queue on all three nodes");
    let devices: Vec<Device> = (0..DEVICES).map(|n| Device::alternating(n, &["r"])).collect();
    seed_devices(&cluster.sql().await, &devices)
        .await
        .expect("seeded");
    cluster
        .wait_for_topic_size("r", DEVICES, Duration::from_secs(30))
        .await;
    let mocks = cluster.mocks();
    let answer_in = |latency_ms: f64| {
        for platform in Platform::ALL {
            mocks.state(platform).faults.set(FaultConfig {
                latency_ms,
                ..FaultConfig::default()
            });
        }
    };
    answer_in(SLOW_MS);
    let accepted = || {
        mocks.state(Platform::Ios).accounting.counters().accepted
            + mocks.state(Platform::Android).accounting.counters().accepted
    };

    let started = Instant::now();
    let (code, body) = cluster
        .send(&json!({"topics": ["r"], "body": "the nodes roll"}))
        .await;
    assert_eq!(code, 202, "{body}");
    let id = body["id"].as_str().expect("an id").to_owned();
    let deadline = Instant::now() + SETTLE;
    while accepted() == 0 {
        assert!(Instant::now() < deadline, "the delivery never got going");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut restarts = Vec::new();
    for node in 0..NODES as usize {
        let before = cluster.status(&id).await;
        assert!(
            before["completed_at"].is_null(),
            "the send is still under way at restart {node}: {before}"
        );
        let at = accepted();
        let began = Instant::now();
        if let Err(err) = rabbit.restart_gracefully(node).await {
            panic!("node {node} restarts: {err:#}\n{}", rabbit.diagnose().await);
        }
        restarts.push(json!({"node": node, "accepted_at_stop": at, "took_s": began.elapsed().as_secs_f64()}));
    }
    let rolled = started.elapsed();
    answer_in(5.0);

    let status = cluster
        .wait_for_status(&id, SETTLE, |s| !s["completed_at"].is_null())
        .await;
    assert_eq!(status["status"], "complete", "{status}");
    // A duplicate pushed just after completion is still counted.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let bound = NODES * IN_FLIGHT;
    let mut figures = json!({
        "restarts": restarts,
        "rolling_restart_s": rolled.as_secs_f64(),
        "send_s": started.elapsed().as_secs_f64(),
        "duplicate_bound": bound,
    });
    assert_every_device_once(&devices, mocks, &status, bound, &mut figures);
    println!("rolling restart of {NODES} nodes mid-send: {figures}");
    cluster.stop().await;
}
