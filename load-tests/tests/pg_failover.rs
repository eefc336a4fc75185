//! PostgreSQL failover under a send: the kit's primary with a synchronous
//! standby (`testkit::pg_failover`), every service given both servers in
//! one URL with `target_session_attrs=read-write`. Mid-harvest the primary
//! is stopped and the standby promoted; the pools drop their dead sessions
//! and open new ones on the promoted standby. Counted: the send completes
//! with every device delivered (lost 0, duplicates within what was in
//! flight), the receipts acknowledged before the failover are all on the
//! new primary, a send cancelled before the failover is still cancelled
//! and none of its devices is pushed, and the old primary, started again
//! by mistake, comes up read-only and takes no session of the services.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use clarion_load_tests::mocks::FaultConfig;
use clarion_load_tests::testkit::node_loss::{
    DISPATCH_WORKERS, IN_FLIGHT, assert_every_device_once, small_batch_options,
};
use clarion_load_tests::testkit::pg_standby::PgStandbyPair;
use clarion_load_tests::testkit::{APP_KEY, Cluster, ClusterServers, Device, seed_devices};
use clarion_proto::Platform;
use serde_json::{Value, json};

/// Devices of the send that lives through the failover, half per platform.
const DEVICES: u64 = 3000;
/// Devices of the send cancelled before the failover.
const CANCELLED_DEVICES: u64 = 200;
/// Receipts posted (and acknowledged) before the failover.
const RECEIPTS: usize = 500;
const SETTLE: Duration = Duration::from_secs(120);

#[actix_web::test]
async fn a_send_completes_through_a_promoted_synchronous_standby_and_nothing_acknowledged_is_lost() {
    let pair = tokio::task::spawn_blocking(PgStandbyPair::start)
        .await
        .unwrap()
        .expect("primary and standby start");
    pair.require_synchronous()
        .await
        .expect("the standby becomes synchronous");
    let amqp_url = std::env::var(clarion_runtime::testing::AMQP_URL_VAR)
        .unwrap_or_else(|_| clarion_runtime::testing::DEFAULT_AMQP_URL.to_owned());
    let mut options = small_batch_options(ClusterServers {
        admin_database_url: pair.failover_url("postgres"),
        amqp_url,
        extra_ca_file: None,
    });
    options.dispatcher = vec![format!("--dispatch-batch-workers={}", DISPATCH_WORKERS)];
    let cluster = Cluster::start(options).await;
    for platform in Platform::ALL {
        // About 500 pushes a second per platform: the failover lands mid-send.
        cluster.mocks().state(platform).faults.set(FaultConfig {
            latency_ms: 20.0,
            ..FaultConfig::default()
        });
    }
    let devices: Vec<Device> = (0..DEVICES).map(|n| Device::alternating(n, &["f"])).collect();
    let cancelled_devices: Vec<Device> = (DEVICES..DEVICES + CANCELLED_DEVICES)
        .map(|n| Device::alternating(n, &["g"]))
        .collect();
    let sql = cluster.sql().await;
    seed_devices(&sql, &devices).await.expect("seeded");
    seed_devices(&sql, &cancelled_devices).await.expect("seeded");
    sql.execute("UPDATE registrations SET receipts = true", &[])
        .await
        .expect("receipts on");
    drop(sql);
    cluster
        .wait_for_topic_size("f", DEVICES, Duration::from_secs(30))
        .await;

    // A send to "g" due in a few seconds, cancelled at once: had the
    // cancel been lost with the old primary, it would fire after the
    // failover.
    let due = chrono::Utc::now() + chrono::Duration::seconds(8);
    let (code, body) = cluster
        .send(&json!({"topics": ["g"], "body": "never", "send_at": due.to_rfc3339()}))
        .await;
    assert_eq!(code, 202, "{body}");
    let cancelled_id = body["id"].as_str().expect("an id").to_owned();
    let (code, body) = cluster.cancel(&cancelled_id).await;
    assert!(code.is_success(), "cancel acknowledged: {code} {body}");

    let started = Instant::now();
    let (code, body) = cluster
        .send(&json!({"topics": ["f"], "body": "the primary goes"}))
        .await;
    assert_eq!(code, 202, "{body}");
    let id = body["id"].as_str().expect("an id").to_owned();
    let receipted = post_receipts(&cluster, &id, &devices[..RECEIPTS]).await;

    let status = cluster
        .wait_for_status(&id, SETTLE, |s| s["jobs"]["done"].as_u64() >= Some(1))
        .await;
    let at_failover = status["jobs"].clone();
    assert!(
        at_failover["done"].as_u64() < at_failover["planned"].as_u64(),
        "mid-harvest: {at_failover}"
    );
    let switch = tokio::task::spawn_blocking(move || {
        let took = pair.fail_over();
        (pair, took)
    });
    let (pair, took) = switch.await.unwrap();
    let promotion = took.expect("the standby is promoted");
    let failed_over = Instant::now();

    let status = wait_until_complete(&cluster, &id).await;
    let after_failover = failed_over.elapsed();
    assert_eq!(status["status"], "complete", "{status}");

    // The cancelled send's time has passed: still cancelled, nothing pushed.
    let remaining = (due - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(remaining + Duration::from_secs(2)).await;
    let cancelled = cluster.status(&cancelled_id).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");

    let mocks = cluster.mocks();
    let mut figures = json!({
        "jobs_at_failover": at_failover,
        "stop_to_promoted_s": promotion.as_secs_f64(),
        "failover_to_complete_s": after_failover.as_secs_f64(),
        "send_s": started.elapsed().as_secs_f64(),
        "duplicate_bound": IN_FLIGHT,
    });
    assert_every_device_once(&devices, mocks, &status, IN_FLIGHT, &mut figures);

    // The receipts acknowledged before the failover, on the new primary.
    let sql = cluster.sql().await;
    let stored: HashSet<String> = sql
        .query(
            "SELECT token FROM device_receipts WHERE notification_id = $1::text::uuid",
            &[&id],
        )
        .await
        .expect("receipts read")
        .iter()
        .map(|row| row.get(0))
        .collect();
    let receipts_lost = receipted.difference(&stored).count();
    figures["receipts"] = json!({"acknowledged": receipted.len(), "lost": receipts_lost});

    // The old primary started again by mistake: a read-only standby of the
    // new one, which no service session reaches.
    let old_port = pair.primary_port;
    let pair = tokio::task::spawn_blocking(move || {
        let started = pair.start_old_primary();
        (pair, started)
    })
    .await
    .unwrap();
    let (pair, restarted) = pair;
    restarted.expect("the old primary starts (as a standby)");
    assert!(
        pair.in_recovery(old_port).await.expect("old primary answers"),
        "the old primary is fenced: read-only"
    );
    assert!(
        !pair
            .in_recovery(pair.standby_port)
            .await
            .expect("new primary answers"),
        "the promoted standby takes writes"
    );
    // A write through the services' URL after the restart lands on the new
    // primary, never on the old one.
    let (code, body) = cluster
        .send(&json!({"topics": ["f"], "body": "after", "send_at": (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339()}))
        .await;
    assert_eq!(code, 202, "{body}");
    let server_port: i32 = cluster
        .sql()
        .await
        .query_one("SELECT inet_server_port()", &[])
        .await
        .expect("port")
        .get(0);
    figures["old_primary"] = json!({"restarted_read_only": true, "sessions_served_by": server_port});
    println!("failover mid-send: {figures}");
    assert_eq!(receipts_lost, 0, "acknowledged receipts lost: {figures}");
    assert_eq!(
        server_port,
        i32::from(pair.standby_port),
        "read-write sessions go to the promoted standby"
    );
    cluster.stop().await;
    drop(pair);
}

/// Posts a "received" receipt for each of `devices` for notification `id`,
/// in requests of 50; the tokens acknowledged (202).
async fn post_receipts(cluster: &Cluster, id: &str, devices: &[Device]) -> HashSet<String> {
    let mut acknowledged = HashSet::new();
    for chunk in devices.chunks(50) {
        let body = json!({"receipts": chunk.iter().map(|d| json!({
            "notification_id": id, "token": d.token, "event": "received"})).collect::<Vec<_>>()});
        let response = cluster
            .http
            .post(format!("{}/api/v1/receipts", cluster.base))
            .bearer_auth(APP_KEY)
            .json(&body)
            .send()
            .await
            .expect("receipts request");
        let code = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        assert!(code.is_success(), "receipts acknowledged: {code} {answer}");
        assert_eq!(answer["ignored"], 0, "{answer}");
        acknowledged.extend(chunk.iter().map(|d| d.token.clone()));
    }
    acknowledged
}

/// Polls the status until the send completed, through the failover (where
/// the coordinator answers 503 for a while).
async fn wait_until_complete(cluster: &Cluster, id: &str) -> Value {
    let deadline = Instant::now() + SETTLE;
    let mut last = Value::Null;
    loop {
        let response = cluster
            .http
            .get(format!("{}/api/v1/notifications/{id}", cluster.base))
            .bearer_auth(clarion_load_tests::testkit::DESK_KEY)
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        if let Ok(response) = response
            && response.status().is_success()
            && let Ok(status) = response.json::<Value>().await
        {
            if !status["completed_at"].is_null() {
                return status;
            }
            last = status;
        }
        assert!(Instant::now() < deadline, "the send did not complete: {last}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
