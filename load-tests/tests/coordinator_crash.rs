//! Kill -9 of the coordinator in the middle of a send (real processes, as
//! `clarion-bench chaos` does at scale): the coordinator started again
//! finishes the notification by itself, every device gets exactly one
//! push, and the reports in flight at the kill are counted once.
//!
//! The services run as real processes: the binaries `cargo build --workspace
//! --bins` puts beside this test (`./scripts/test` builds them first).

use std::time::{Duration, Instant};

use clarion_load_tests::local_cluster::{LocalCluster, LocalClusterConfig, Member};
use clarion_load_tests::mocks::FaultConfig;
use clarion_load_tests::testkit::{Mocks, alternating_devices, platforms_of, seed_devices};
use clarion_proto::Platform;
use clarion_runtime::testing::{TestDatabase, TestNamespace};
use serde_json::json;

const DEVICES: u64 = 6000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_mid_send_and_started_again_completes_it_with_one_push_per_device() {
    let db = TestDatabase::create().await;
    let namespace = TestNamespace::new();
    let mocks = Mocks::start().await;
    for platform in Platform::ALL {
        // A slow provider keeps the send going for a few seconds, so the
        // kill surely lands mid-send.
        mocks.state(platform).faults.set(FaultConfig {
            latency_ms: 10.0,
            ..FaultConfig::default()
        });
    }
    let logs = std::env::temp_dir().join(format!("clarion-crash-{}", namespace.settings.namespace));
    let mut dispatcher_env: Vec<(String, String)> = mocks.dispatcher_env();
    dispatcher_env.extend([
        ("CLARION_DISPATCH_BATCH_WORKERS".into(), "1".into()),
        ("CLARION_DISPATCH_STREAMS_PER_BATCH".into(), "20".into()),
    ]);
    let config = LocalClusterConfig {
        database_url: db.url.clone(),
        amqp_url: namespace.settings.url.clone(),
        namespace: namespace.settings.namespace.clone(),
        harvesters: 1,
        coordinator_env: vec![("CLARION_TOKENS_PER_JOB".into(), "500".into())],
        harvester_env: vec![("CLARION_BATCH_SIZE".into(), "100".into())],
        dispatcher_env,
        log_dir: logs.clone(),
    };
    let mut cluster = LocalCluster::start(&config).await.expect("the cluster starts");
    let devices = alternating_devices(DEVICES, &["t"]);
    let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    seed_devices(&client, &devices).await.unwrap();
    cluster.get("/api/v1/topics/t").await.unwrap();

    let id = cluster
        .send(&json!({"topics": ["t"], "body": "survives a crash"}))
        .await
        .unwrap();
    let accepted = || {
        Platform::ALL
            .iter()
            .map(|p| mocks.state(*p).accounting.counters().accepted)
            .sum::<u64>()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while accepted() < 1000 {
        assert!(Instant::now() < deadline, "the send never got going");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(accepted() < DEVICES, "still sending at the kill");
    cluster.coordinator.kill();
    cluster
        .restart(Member::Coordinator)
        .await
        .expect("the coordinator starts again");

    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Ok(status) = cluster.get(&format!("/api/v1/notifications/{id}")).await
            && !status["completed_at"].is_null()
        {
            break status;
        }
        assert!(Instant::now() < deadline, "the send did not complete");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status["status"], "complete", "{status}");
    for platform in platforms_of(&devices) {
        let stats = mocks.state(platform).accounting.stats();
        assert_eq!(stats.unique_tokens, DEVICES / 2, "{platform}: every device");
        assert_eq!(stats.duplicate_pushes, 0, "{platform}: exactly once");
        let sent = status["delivery"][platform.as_str()]["sent"].as_u64();
        assert_eq!(sent, Some(DEVICES / 2), "{platform}: each report counted once");
    }
    cluster.stop();
    let _ = std::fs::remove_dir_all(&logs);
}
