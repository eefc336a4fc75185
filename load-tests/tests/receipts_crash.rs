//! Kill -9 of the coordinator while apps post receipts (issue 35): every
//! receipt the coordinator acknowledged (202) before the kill is stored,
//! and the apps' retries after the restart count nothing twice.
//!
//! The coordinator runs as a real process: the binary `cargo build
//! --workspace --bins` puts beside this test (`./scripts/test` builds it).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clarion_load_tests::local_cluster::{APP_KEY, LocalCluster, LocalClusterConfig, Member};
use clarion_load_tests::testkit::{alternating_devices, seed_devices};
use clarion_runtime::testing::{TestDatabase, TestNamespace};
use serde_json::{Value, json};

const DEVICES: u64 = 3000;
const PER_REQUEST: usize = 25;
const CLIENTS: usize = 4;

/// Tokens acknowledged by a 202, split by whether the kill had happened.
#[derive(Default)]
struct Acknowledged {
    before_kill: HashSet<String>,
    after_kill: HashSet<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_acknowledged_before_a_kill_9_are_all_stored() {
    let db = TestDatabase::create().await;
    let namespace = TestNamespace::new();
    let logs = std::env::temp_dir().join(format!("clarion-receipts-crash-{}", namespace.settings.namespace));
    let config = LocalClusterConfig {
        database_url: db.url.clone(),
        amqp_url: namespace.settings.url.clone(),
        namespace: namespace.settings.namespace.clone(),
        harvesters: 0,
        coordinator_env: Vec::new(),
        harvester_env: Vec::new(),
        dispatcher_env: Vec::new(),
        log_dir: logs.clone(),
    };
    let mut cluster = LocalCluster::start(&config)
        .await
        .expect("the coordinator starts");
    let devices = alternating_devices(DEVICES, &["t"]);
    let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    seed_devices(&client, &devices).await.unwrap();
    client
        .execute("UPDATE registrations SET receipts = true", &[])
        .await
        .unwrap();
    let id = cluster
        .send(&json!({"topics": ["t"], "body": "receipts survive a crash"}))
        .await
        .unwrap();

    let tokens: Vec<String> = devices.iter().map(|d| d.token.clone()).collect();
    let acknowledged = Arc::new(Mutex::new(Acknowledged::default()));
    let killed = Arc::new(AtomicBool::new(false));
    let base = cluster.base.clone();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut clients = Vec::new();
    for share in tokens.chunks(tokens.len().div_ceil(CLIENTS)) {
        let batches: Vec<Vec<String>> = share.chunks(PER_REQUEST).map(<[String]>::to_vec).collect();
        let (http, base, id) = (http.clone(), base.clone(), id.clone());
        let (acknowledged, killed) = (acknowledged.clone(), killed.clone());
        clients.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(180);
            for batch in batches {
                let body = json!({"receipts": batch.iter().map(|token| json!({
                    "notification_id": id, "token": token, "event": "received"})).collect::<Vec<_>>()});
                // An app retries a batch until it is acknowledged (bounded).
                loop {
                    let was_killed = killed.load(Ordering::SeqCst);
                    let answer = http
                        .post(format!("{base}/api/v1/receipts"))
                        .bearer_auth(APP_KEY)
                        .json(&body)
                        .send()
                        .await;
                    let answer = match answer {
                        Ok(response) if response.status() != reqwest::StatusCode::ACCEPTED => {
                            let status = response.status();
                            let text = response.text().await.unwrap_or_default();
                            assert!(
                                status == reqwest::StatusCode::SERVICE_UNAVAILABLE,
                                "only 503 may turn a receipt away: {status} {text}"
                            );
                            None
                        }
                        Ok(response) => Some(response),
                        Err(_) => None,
                    };
                    if let Some(response) = answer {
                        let counts: Value = response.json().await.unwrap_or(Value::Null);
                        assert_eq!(counts["ignored"], 0, "{counts}");
                        let mut acknowledged = acknowledged.lock().unwrap();
                        let set = if was_killed {
                            &mut acknowledged.after_kill
                        } else {
                            &mut acknowledged.before_kill
                        };
                        set.extend(batch.iter().cloned());
                        break;
                    }
                    assert!(Instant::now() < deadline, "receipts never acknowledged");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }));
    }
    // Kill once a good share is acknowledged and the clients are mid-flight.
    let deadline = Instant::now() + Duration::from_secs(60);
    while acknowledged.lock().unwrap().before_kill.len() < DEVICES as usize / 4 {
        assert!(Instant::now() < deadline, "the receipts never got going");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    killed.store(true, Ordering::SeqCst);
    cluster.coordinator.kill();
    let acknowledged_before_kill = acknowledged.lock().unwrap().before_kill.len();
    assert!(
        acknowledged_before_kill < DEVICES as usize,
        "still posting at the kill"
    );
    cluster
        .restart(Member::Coordinator)
        .await
        .expect("the coordinator starts again");
    for client in clients {
        client.await.expect("a client finished");
    }

    let stored: HashSet<String> = client
        .query(
            "SELECT token FROM device_receipts WHERE notification_id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let acknowledged = std::mem::take(&mut *acknowledged.lock().unwrap());
    let lost_before_kill = acknowledged.before_kill.difference(&stored).count();
    let lost_after_kill = acknowledged.after_kill.difference(&stored).count();
    let aggregate: i64 = client
        .query_one(
            "SELECT coalesce(sum(received), 0)::bigint FROM notification_receipt_counts
              WHERE notification_id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    println!(
        "receipts: acknowledged before the kill {}, after {}, stored {}, aggregate {}, lost {}",
        acknowledged.before_kill.len(),
        acknowledged.after_kill.len(),
        stored.len(),
        aggregate,
        lost_before_kill + lost_after_kill
    );
    assert_eq!(lost_before_kill, 0, "acknowledged before the kill, not stored");
    assert_eq!(lost_after_kill, 0, "acknowledged after the restart, not stored");
    assert_eq!(
        stored.len() as u64,
        DEVICES,
        "every device's receipt stored once the retries are done"
    );
    assert_eq!(
        aggregate, DEVICES as i64,
        "the counters moved with the rows, each once"
    );
    cluster.stop();
    let _ = std::fs::remove_dir_all(&logs);
}
