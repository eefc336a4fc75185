//! A send over a three-node RabbitMQ cluster (`testkit::rabbit_cluster`)
//! that loses nodes. The services get every node's URL
//! (`CLARION_AMQP_URL`, comma-separated); the topology they declare once
//! the cluster has formed puts every quorum queue on all three nodes; a
//! send survives kill -9 of the node leading `harvest.jobs` mid-harvest,
//! and another of the node leading `deliver.ios` mid-delivery: every
//! device delivered (the mocks' distinct tokens and their digest), lost 0,
//! duplicates no more than what was in flight, the notification complete.

use std::time::{Duration, Instant};

use clarion_load_tests::mocks::FaultConfig;
use clarion_load_tests::testkit::node_loss::{IN_FLIGHT, assert_every_device_once, small_batch_options};
use clarion_load_tests::testkit::rabbit_cluster::RabbitCluster;
use clarion_load_tests::testkit::{Cluster, Device, seed_devices};
use clarion_proto::Platform;
use serde_json::{Value, json};

/// Devices per send, half of them on each platform.
const DEVICES: u64 = 4000;
const SETTLE: Duration = Duration::from_secs(120);

#[actix_web::test]
async fn a_send_survives_kill_9_of_the_node_leading_harvest_jobs_then_of_the_one_leading_deliver_ios() {
    let mut rabbit = RabbitCluster::start(3).await.expect("the broker cluster starts");
    let options = small_batch_options(rabbit.servers());
    let cluster = Cluster::start(options).await;
    let replicated = rabbit
        .check_replicated(&format!("{}.", cluster.broker.namespace))
        .await
        .expect("every quorum queue on all three nodes");
    println!("quorum queues on all three nodes: {replicated}");
    for platform in Platform::ALL {
        // A slow provider: about 500 pushes a second per platform, so a
        // kill lands mid-send.
        cluster.mocks().state(platform).faults.set(FaultConfig {
            latency_ms: 20.0,
            ..FaultConfig::default()
        });
    }

    // 1. The node leading the shard jobs goes mid-harvest.
    let harvest_queue = cluster.names.harvest_queue();
    let leader = rabbit.leader_of(&harvest_queue).await.expect("a leader");
    let figures = send_and_kill(&cluster, &mut rabbit, "t", 0, Kill::WhenJobsDone(leader)).await;
    println!("harvest.jobs leader killed: {figures}");
    rabbit.restart(leader).await.expect("the node starts again");

    // 2. The node leading the iOS batches goes mid-delivery.
    let ios_queue = cluster.names.deliver_queue(Platform::Ios);
    let leader = rabbit.leader_of(&ios_queue).await.expect("a leader");
    let figures = send_and_kill(&cluster, &mut rabbit, "u", DEVICES, Kill::WhenIosHalfway(leader)).await;
    println!("deliver.ios leader killed: {figures}");

    cluster.stop().await;
}

/// When to kill which node.
#[derive(Debug, Clone, Copy)]
enum Kill {
    /// Once some of the notification's shard jobs are done, not all.
    WhenJobsDone(usize),
    /// Once the iOS mock took a quarter of its devices.
    WhenIosHalfway(usize),
}

/// Seeds `DEVICES` devices numbered from `first` on `topic`, sends to it,
/// kills a node as `kill` says, and checks the bounds; the figures.
async fn send_and_kill(
    cluster: &Cluster,
    rabbit: &mut RabbitCluster,
    topic: &str,
    first: u64,
    kill: Kill,
) -> Value {
    let devices: Vec<Device> = (first..first + DEVICES)
        .map(|n| Device::alternating(n, &[topic]))
        .collect();
    seed_devices(&cluster.sql().await, &devices)
        .await
        .expect("seeded");
    cluster
        .wait_for_topic_size(topic, DEVICES, Duration::from_secs(30))
        .await;
    let mocks = cluster.mocks();
    for platform in Platform::ALL {
        mocks.state(platform).accounting.reset();
    }
    let accepted = |platform: Platform| mocks.state(platform).accounting.counters().accepted;

    let started = Instant::now();
    let (code, body) = cluster
        .send(&json!({"topics": [topic], "body": "a node goes"}))
        .await;
    assert_eq!(code, 202, "{body}");
    let id = body["id"].as_str().expect("an id").to_owned();
    let (node, at_kill) = match kill {
        Kill::WhenJobsDone(node) => {
            let status = cluster
                .wait_for_status(&id, SETTLE, |s| s["jobs"]["done"].as_u64() >= Some(1))
                .await;
            let jobs = status["jobs"].clone();
            assert!(
                jobs["done"].as_u64() < jobs["planned"].as_u64(),
                "mid-harvest: {jobs}"
            );
            (node, jobs)
        }
        Kill::WhenIosHalfway(node) => {
            let deadline = Instant::now() + SETTLE;
            while accepted(Platform::Ios) < DEVICES / 8 {
                assert!(Instant::now() < deadline, "the iOS delivery never got going");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (node, json!({"ios_accepted": accepted(Platform::Ios)}))
        }
    };
    rabbit.kill(node);
    let killed = Instant::now();
    // Progress after the kill: the longest pause between two pushes the
    // mocks took is how long the pipeline stood still.
    let mut longest_pause = Duration::ZERO;
    let mut last_total = accepted(Platform::Ios) + accepted(Platform::Android);
    let mut last_change = Instant::now();
    let status = loop {
        let status = cluster.status(&id).await;
        if !status["completed_at"].is_null() {
            break status;
        }
        let total = accepted(Platform::Ios) + accepted(Platform::Android);
        if total != last_total {
            longest_pause = longest_pause.max(last_change.elapsed());
            last_total = total;
            last_change = Instant::now();
        }
        if killed.elapsed() > SETTLE {
            panic!("the send did not complete: {status}\n{}", rabbit.diagnose().await);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let after_kill = killed.elapsed();
    assert_eq!(status["status"], "complete", "{status}");

    let mut figures = json!({
        "at_kill": at_kill,
        "longest_pause_s": longest_pause.as_secs_f64(),
        "kill_to_complete_s": after_kill.as_secs_f64(),
        "send_s": started.elapsed().as_secs_f64(),
        "duplicate_bound": IN_FLIGHT,
    });
    assert_every_device_once(&devices, mocks, &status, IN_FLIGHT, &mut figures);
    figures
}
