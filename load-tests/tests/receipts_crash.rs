//! Kill -9 of the coordinator in the middle of a storm of receipts (issue
//! 35) and registration writes (issue 36), both group-committed: 64
//! concurrent clients, every receipt (202) and every registration (200) the
//! coordinator acknowledged before the kill is stored, and the apps'
//! retries after the restart count nothing twice.
//!
//! The coordinator runs as a real process: the binary `cargo build
//! --workspace --bins` puts beside this test (`./scripts/test` builds it).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clarion_load_tests::local_cluster::{APP_KEY, LocalCluster, LocalClusterConfig, Member};
use clarion_load_tests::testkit::{Device, alternating_devices, seed_devices};
use clarion_runtime::testing::{TestDatabase, TestNamespace};
use serde_json::{Value, json};

const DEVICES: u64 = 3000;
const PER_REQUEST: usize = 5;
/// Clients posting receipts, and as many writing registrations: 64 in all.
const CLIENTS: usize = 32;
/// Registrations each registration client writes (new devices).
const REGISTRATIONS_PER_CLIENT: u64 = 60;

/// Tokens acknowledged by a 202, split by whether the kill had happened.
#[derive(Default)]
struct Acknowledged {
    before_kill: HashSet<String>,
    after_kill: HashSet<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_and_registrations_acknowledged_before_a_kill_9_are_all_stored() {
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
                let counts = until_acknowledged(&killed, deadline, || {
                    http.post(format!("{base}/api/v1/receipts"))
                        .bearer_auth(APP_KEY)
                        .json(&body)
                })
                .await;
                let (answer, was_killed) = counts.expect("receipts acknowledged");
                assert_eq!(answer["ignored"], 0, "{answer}");
                let mut acknowledged = acknowledged.lock().unwrap();
                let set = if was_killed {
                    &mut acknowledged.after_kill
                } else {
                    &mut acknowledged.before_kill
                };
                set.extend(batch.iter().cloned());
            }
        }));
    }
    // The registration clients: each registers new devices one by one
    // (an app opening), retrying each until it is acknowledged.
    let registered = Arc::new(Mutex::new(Acknowledged::default()));
    for client_index in 0..CLIENTS as u64 {
        let (http, base) = (http.clone(), base.clone());
        let (registered, killed) = (registered.clone(), killed.clone());
        clients.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(180);
            for n in 0..REGISTRATIONS_PER_CLIENT {
                let device = Device::alternating(DEVICES + client_index * REGISTRATIONS_PER_CLIENT + n, &[]);
                let body = json!({"platform": device.platform.as_str(), "topics": ["storm", "storm/b"]});
                let url = format!("{base}/api/v1/registrations/{}", device.token);
                let answer = until_acknowledged(&killed, deadline, || {
                    http.put(&url).bearer_auth(APP_KEY).json(&body)
                })
                .await;
                let (_, was_killed) = answer.expect("registration acknowledged");
                let mut registered = registered.lock().unwrap();
                let set = if was_killed {
                    &mut registered.after_kill
                } else {
                    &mut registered.before_kill
                };
                set.insert(device.token);
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
    let registered_before_kill = registered.lock().unwrap().before_kill.len();
    let registrations = CLIENTS * REGISTRATIONS_PER_CLIENT as usize;
    assert!(
        registered_before_kill < registrations,
        "still registering at the kill"
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

    let registered_rows: HashSet<String> = client
        .query("SELECT token FROM registrations WHERE topic = 'storm/b'", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let registered = std::mem::take(&mut *registered.lock().unwrap());
    let lost_registrations = registered.before_kill.difference(&registered_rows).count()
        + registered.after_kill.difference(&registered_rows).count();
    println!(
        "registrations: acknowledged before the kill {}, after {}, stored {}, lost {}",
        registered.before_kill.len(),
        registered.after_kill.len(),
        registered_rows.len(),
        lost_registrations
    );
    assert_eq!(lost_registrations, 0, "acknowledged registrations not stored");
    assert_eq!(
        registered_rows.len(),
        registrations,
        "every device registered once the retries are done"
    );
    cluster.stop();
    let _ = std::fs::remove_dir_all(&logs);
}

/// Sends the request `build` makes until it is acknowledged (a 2xx), as
/// an app retries; only a 503 or a broken connection (the kill) may turn
/// it away. The answer's body, and whether the kill had happened when the
/// acknowledged attempt was sent; `None` past `deadline`.
async fn until_acknowledged(
    killed: &AtomicBool,
    deadline: Instant,
    build: impl Fn() -> reqwest::RequestBuilder,
) -> Option<(Value, bool)> {
    while Instant::now() < deadline {
        let was_killed = killed.load(Ordering::SeqCst);
        match build().send().await {
            Ok(response) if response.status().is_success() => {
                return Some((response.json().await.unwrap_or(Value::Null), was_killed));
            }
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                assert_eq!(
                    status,
                    reqwest::StatusCode::SERVICE_UNAVAILABLE,
                    "only 503 may turn a write away: {text}"
                );
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}
