//! A network partition of one node of the three-node RabbitMQ cluster
//! (`testkit::rabbit_cluster`) under a send. The machine has no packet
//! filter to cut a port with, so the node is cut off at the Erlang
//! distribution layer (`RabbitCluster::isolate`: it refuses its peers and
//! they lose it). The node chosen leads `deliver.ios`, mid-delivery; with
//! `pause_minority` it pauses (its AMQP port stops answering) and the two
//! others finish the send alone; then the partition heals (the node is
//! restarted) and it is a member again. Counted per platform: every
//! device delivered (distinct tokens and their digest), lost 0,
//! duplicates within what was in flight, each report counted once.

use std::time::{Duration, Instant};

use clarion_load_tests::mocks::FaultConfig;
use clarion_load_tests::testkit::node_loss::{IN_FLIGHT, assert_every_device_once, small_batch_options};
use clarion_load_tests::testkit::rabbit_cluster::RabbitCluster;
use clarion_load_tests::testkit::{Cluster, Device, seed_devices};
use clarion_proto::Platform;
use lapin::ConnectionProperties;
use serde_json::json;

const DEVICES: u64 = 2000;
const SETTLE: Duration = Duration::from_secs(120);

#[actix_web::test]
async fn a_send_completes_on_the_majority_when_the_node_leading_deliver_ios_is_cut_off() {
    let mut rabbit = RabbitCluster::start(3).await.expect("the broker cluster starts");
    let options = small_batch_options(rabbit.servers());
    let cluster = Cluster::start(options).await;
    let replicated = rabbit
        .check_replicated(&format!("{}.", cluster.broker.namespace))
        .await
        .expect("every quorum queue on all three nodes");
    let devices: Vec<Device> = (0..DEVICES).map(|n| Device::alternating(n, &["p"])).collect();
    seed_devices(&cluster.sql().await, &devices)
        .await
        .expect("seeded");
    cluster
        .wait_for_topic_size("p", DEVICES, Duration::from_secs(30))
        .await;
    let mocks = cluster.mocks();
    for platform in Platform::ALL {
        // About 100 pushes a second per platform: the cut lands mid-send.
        mocks.state(platform).faults.set(FaultConfig {
            latency_ms: 100.0,
            ..FaultConfig::default()
        });
    }
    let ios_accepted = || mocks.state(Platform::Ios).accounting.counters().accepted;
    let leader = rabbit
        .leader_of(&cluster.names.deliver_queue(Platform::Ios))
        .await
        .expect("a leader");

    let started = Instant::now();
    let (code, body) = cluster
        .send(&json!({"topics": ["p"], "body": "a node is cut off"}))
        .await;
    assert_eq!(code, 202, "{body}");
    let id = body["id"].as_str().expect("an id").to_owned();
    let deadline = Instant::now() + SETTLE;
    while ios_accepted() < DEVICES / 10 {
        assert!(Instant::now() < deadline, "the iOS delivery never got going");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let at_cut = ios_accepted();
    if let Err(err) = rabbit.isolate(leader).await {
        panic!("node {leader} is cut off: {err:#}\n{}", rabbit.diagnose().await);
    }
    let cut = Instant::now();
    // pause_minority: the cut-off node stops serving its clients.
    let trust = cluster.trust.clone();
    let paused_after = loop {
        let probe = tokio::time::timeout(
            Duration::from_secs(5),
            clarion_runtime::amqp::connect::open(
                &rabbit.node_url(leader),
                ConnectionProperties::default(),
                &trust,
            ),
        )
        .await;
        if !matches!(probe, Ok(Ok(_))) {
            break cut.elapsed();
        }
        assert!(cut.elapsed() < SETTLE, "the cut-off node never paused");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let status = cluster
        .wait_for_status(&id, SETTLE, |s| !s["completed_at"].is_null())
        .await;
    let cut_to_complete = cut.elapsed();
    assert_eq!(status["status"], "complete", "{status}");

    // The partition heals: the node comes back as a member of every queue.
    if let Err(err) = rabbit.restart(leader).await {
        panic!("node {leader} rejoins: {err:#}\n{}", rabbit.diagnose().await);
    }
    let replicated_after = rabbit
        .check_replicated(&format!("{}.", cluster.broker.namespace))
        .await
        .expect("every quorum queue on all three nodes again");
    assert_eq!(replicated_after, replicated, "the same queues, all three members");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut figures = json!({
        "ios_accepted_at_cut": at_cut,
        "cut_to_paused_s": paused_after.as_secs_f64(),
        "cut_to_complete_s": cut_to_complete.as_secs_f64(),
        "send_s": started.elapsed().as_secs_f64(),
        "duplicate_bound": IN_FLIGHT,
    });
    assert_every_device_once(&devices, mocks, &status, IN_FLIGHT, &mut figures);
    println!("deliver.ios leader cut off mid-send: {figures}");
    cluster.stop().await;
}
