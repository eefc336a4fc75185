//! SIGTERM to a harvester and a dispatcher in the middle of a send: the
//! send still completes with every device delivered exactly once, and each
//! process exits 0 within its grace period.
//!
//! The services run as real processes: the binaries `cargo build --workspace
//! --bins` puts beside this test (`./scripts/test` builds them first).

use std::time::{Duration, Instant};

use clarion_load_tests::local_cluster::{LocalCluster, LocalClusterConfig};
use clarion_load_tests::mocks::FaultConfig;
use clarion_load_tests::testkit::{Mocks, alternating_devices, platforms_of, seed_devices};
use clarion_proto::Platform;
use clarion_runtime::testing::{TestDatabase, TestNamespace};
use serde_json::json;

const GRACE: Duration = Duration::from_secs(20);
const DEVICES: u64 = 6000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_send_loses_nothing_and_exits_zero() {
    let db = TestDatabase::create().await;
    let namespace = TestNamespace::new();
    let mocks = Mocks::start().await;
    for platform in Platform::ALL {
        // A slow provider keeps the send going for a few seconds (about 2k
        // pushes/s a dispatcher), so the signals surely land mid-send even
        // when this test's own thread is slow to notice that it started.
        mocks.state(platform).faults.set(FaultConfig {
            latency_ms: 10.0,
            ..FaultConfig::default()
        });
    }
    let logs = std::env::temp_dir().join(format!("clarion-shutdown-{}", namespace.settings.namespace));
    let grace = (
        "CLARION_SHUTDOWN_GRACE_SECS".to_owned(),
        GRACE.as_secs().to_string(),
    );
    let mut dispatcher_env: Vec<(String, String)> = mocks.dispatcher_env();
    dispatcher_env.extend([
        grace.clone(),
        ("CLARION_DISPATCH_BATCH_WORKERS".into(), "1".into()),
        ("CLARION_DISPATCH_STREAMS_PER_BATCH".into(), "20".into()),
    ]);
    let config = LocalClusterConfig {
        database_url: db.url.clone(),
        amqp_url: namespace.settings.url.clone(),
        namespace: namespace.settings.namespace.clone(),
        harvesters: 1,
        coordinator_env: vec![("CLARION_TOKENS_PER_JOB".into(), "500".into())],
        harvester_env: vec![grace, ("CLARION_BATCH_SIZE".into(), "100".into())],
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
        .send(&json!({"topics": ["t"], "body": "survives a rollout"}))
        .await
        .unwrap();
    let accepted = || {
        Platform::ALL
            .iter()
            .map(|p| mocks.state(*p).accounting.counters().accepted)
            .sum::<u64>()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while accepted() < 400 {
        assert!(Instant::now() < deadline, "the send never got going");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(accepted() < DEVICES, "still sending when the signals go out");

    // What Kubernetes does in a rollout: SIGTERM, then wait for the exit.
    let harvester = cluster.harvesters[0].terminate(GRACE + Duration::from_secs(5));
    let dispatcher = cluster.dispatchers[0].terminate(GRACE + Duration::from_secs(5));
    for (name, outcome) in [("harvester", harvester), ("iOS dispatcher", dispatcher)] {
        let (status, took) =
            outcome.unwrap_or_else(|| panic!("the {name} did not exit within its grace period"));
        assert!(status.success(), "the {name} exited with {status}");
        assert!(took < GRACE, "the {name} took {took:?}");
    }
    cluster.start_harvester().await.expect("a new harvester");
    cluster
        .start_dispatcher(Platform::Ios)
        .await
        .expect("a new iOS dispatcher");

    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        let status = cluster.get(&format!("/api/v1/notifications/{id}")).await.unwrap();
        if !status["completed_at"].is_null() {
            break status;
        }
        assert!(Instant::now() < deadline, "the send did not complete: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status["status"], "complete", "{status}");
    for platform in platforms_of(&devices) {
        let stats = mocks.state(platform).accounting.stats();
        assert_eq!(stats.unique_tokens, DEVICES / 2, "{platform}: every device");
        assert_eq!(stats.duplicate_pushes, 0, "{platform}: exactly once");
    }
    cluster.stop();
    let _ = std::fs::remove_dir_all(&logs);
}
