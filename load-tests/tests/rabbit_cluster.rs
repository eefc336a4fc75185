//! A send over a three-node RabbitMQ cluster (`testkit::rabbit_cluster`)
//! that loses nodes. The services get every node's URL
//! (`CLARION_AMQP_URL`, comma-separated); the topology they declare once
//! the cluster has formed puts every quorum queue on all three nodes; a
//! send survives kill -9 of the node leading `harvest.jobs` mid-harvest,
//! and another of the node leading `deliver.ios` mid-delivery: every
//! device delivered (the mocks' distinct tokens and their digest), lost 0,
//! duplicates no more than what was in flight, the notification complete.

use std::time::{Duration, Instant};

use clarion_load_tests::mocks::{FaultConfig, digest};
use clarion_load_tests::testkit::rabbit_cluster::RabbitCluster;
use clarion_load_tests::testkit::{Cluster, ClusterOptions, ClusterServers, Device, seed_devices};
use clarion_proto::Platform;
use clarion_runtime::testing::{ADMIN_URL_VAR, DEFAULT_ADMIN_URL};
use serde_json::{Value, json};

/// Devices per send, half of them on each platform.
const DEVICES: u64 = 4000;
const TOKENS_PER_JOB: u64 = 100;
const BATCH_SIZE: u64 = 25;
const HARVEST_WORKERS: u64 = 2;
const PUBLISH_WINDOW: u64 = 2;
const DISPATCH_WORKERS: u64 = 2;
/// Per platform: the batches a harvester may have published unconfirmed
/// plus those a dispatcher holds unacked, in tokens — what a lost node can
/// make the pipeline do twice.
const IN_FLIGHT: u64 = (HARVEST_WORKERS * PUBLISH_WINDOW + DISPATCH_WORKERS) * BATCH_SIZE;
const SETTLE: Duration = Duration::from_secs(120);

#[actix_web::test]
async fn a_send_survives_kill_9_of_the_node_leading_harvest_jobs_then_of_the_one_leading_deliver_ios() {
    let mut rabbit = RabbitCluster::start(3).await.expect("the broker cluster starts");
    let options = ClusterOptions {
        coordinator: vec![format!("--tokens-per-job={TOKENS_PER_JOB}")],
        harvester: vec![
            format!("--harvest-workers={HARVEST_WORKERS}"),
            format!("--harvest-publish-window={PUBLISH_WINDOW}"),
            format!("--batch-size={BATCH_SIZE}"),
        ],
        harvesters: 1,
        dispatcher: vec![
            format!("--dispatch-batch-workers={DISPATCH_WORKERS}"),
            "--dispatch-streams-per-batch=5".into(),
        ],
        dispatchers: true,
        servers: Some(ClusterServers {
            admin_database_url: std::env::var(ADMIN_URL_VAR).unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_owned()),
            amqp_url: rabbit.amqp_url(),
            extra_ca_file: None,
        }),
        receipts: None,
    };
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
    for platform in Platform::ALL {
        let expected: Vec<&str> = devices
            .iter()
            .filter(|d| d.platform == platform)
            .map(|d| d.token.as_str())
            .collect();
        let stats = mocks.state(platform).stats();
        let lost = expected.len() as u64 - stats.unique_tokens.min(expected.len() as u64);
        figures[platform.as_str()] = json!({
            "devices": expected.len(),
            "delivered": stats.unique_tokens,
            "duplicates": stats.duplicate_pushes,
            "lost": lost,
        });
        assert_eq!(
            stats.unique_tokens,
            expected.len() as u64,
            "{platform}: every device, lost 0: {figures}"
        );
        assert_eq!(
            stats.digest,
            digest(expected.iter().copied()),
            "{platform}: the very devices"
        );
        assert!(
            stats.duplicate_pushes <= IN_FLIGHT,
            "{platform}: duplicates within what was in flight: {figures}"
        );
        let sent = status["delivery"][platform.as_str()]["sent"].as_u64();
        assert_eq!(
            sent,
            Some(expected.len() as u64),
            "{platform}: each report counted once: {status}"
        );
    }
    figures
}
