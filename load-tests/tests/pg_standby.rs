//! The PostgreSQL primary and streaming standby of the test kit, and the
//! rule a replica read rests on: a row committed on the primary before
//! position L is seen on the standby once it has replayed L. Many times:
//! insert, take the primary's LSN, read on the standby at once (which
//! may miss the row: replication is asynchronous) and after waiting for
//! the LSN (which must not). Then the harvester streaming from the
//! standby (`CLARION_HARVEST_DATABASE_URL`), which applies half a second
//! late: devices registered on the primary just before each send are all
//! harvested.

use std::time::Duration;

use clarion_load_tests::testkit::pg_standby::PgStandbyPair;
use clarion_load_tests::testkit::{Cluster, ClusterOptions, ClusterServers, Device, seed_devices};
use serde_json::json;
use tokio_postgres::NoTls;

const ROUNDS: i64 = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_committed_before_an_lsn_is_on_the_standby_once_it_replayed_that_lsn() {
    let pair = tokio::task::spawn_blocking(PgStandbyPair::start)
        .await
        .unwrap()
        .expect("primary and standby start");
    let (primary, connection) = tokio_postgres::connect(&pair.primary_url("postgres"), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let (standby, connection) = tokio_postgres::connect(&pair.standby_url("postgres"), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let in_recovery: bool = standby
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .unwrap()
        .get(0);
    assert!(in_recovery, "the standby is a standby");
    primary
        .batch_execute("CREATE TABLE devices (n bigint PRIMARY KEY)")
        .await
        .unwrap();

    let (mut missed_at_once, mut missed_after_wait) = (0, 0);
    let mut waits = Vec::with_capacity(ROUNDS as usize);
    for n in 0..ROUNDS {
        primary
            .execute("INSERT INTO devices VALUES ($1)", &[&n])
            .await
            .unwrap();
        let lsn = pair.primary_lsn().await.unwrap();
        let at_once = standby
            .query_opt("SELECT 1 FROM devices WHERE n = $1", &[&n])
            .await;
        // Before the table's creation is replayed the standby has no table.
        if !matches!(at_once, Ok(Some(_))) {
            missed_at_once += 1;
        }
        waits.push(
            pair.wait_replayed(&lsn, Duration::from_secs(30))
                .await
                .expect("the standby catches up"),
        );
        let after_wait = standby
            .query_opt("SELECT 1 FROM devices WHERE n = $1", &[&n])
            .await
            .unwrap();
        if after_wait.is_none() {
            missed_after_wait += 1;
        }
    }
    waits.sort();
    println!(
        "rounds {ROUNDS}: missed reading at once {missed_at_once}, missed after the LSN wait {missed_after_wait}; \
         wait p50 {:?}, max {:?}",
        waits[waits.len() / 2],
        waits[waits.len() - 1]
    );
    assert_eq!(
        missed_after_wait, 0,
        "a replica read after the LSN wait misses nothing"
    );
}

/// Devices registered just before each send, and sends.
const PER_SEND: u64 = 40;
const SENDS: u64 = 15;
/// How far behind the standby applies: longer than a send takes to reach
/// the harvester, so a harvest that did not wait would miss the devices.
const REPLICA_LAG: Duration = Duration::from_millis(500);

#[actix_web::test]
async fn a_harvest_from_the_replica_misses_no_device_registered_just_before_the_send() {
    let pair = tokio::task::spawn_blocking(|| PgStandbyPair::start_delayed(REPLICA_LAG))
        .await
        .unwrap()
        .expect("primary and standby start");
    let amqp_url = std::env::var(clarion_runtime::testing::AMQP_URL_VAR)
        .unwrap_or_else(|_| clarion_runtime::testing::DEFAULT_AMQP_URL.to_owned());
    let options = ClusterOptions {
        servers: Some(ClusterServers {
            admin_database_url: pair.primary_url("postgres"),
            amqp_url,
            extra_ca_file: None,
        }),
        // Dispatchers report what was pushed: without reports the relay's
        // schedule sees the sends stall and holds the later ones' jobs back.
        dispatchers: true,
        ..ClusterOptions::default()
    };
    let mut cluster = Cluster::start(options).await;
    let replica = format!("--harvest-database-url={}", pair.standby_url(&cluster.db.name));
    cluster
        .start_harvester(&[&replica, "--harvest-replica-wait-ms=10000"])
        .await;
    let primary = cluster.sql().await;

    let mut missed = 0;
    for send in 0..SENDS {
        let topic = format!("r{send}");
        let devices: Vec<Device> = (send * PER_SEND..(send + 1) * PER_SEND)
            .map(|n| Device::alternating(n, &[&topic]))
            .collect();
        // Committed on the primary, then the send at once: the standby has
        // not replayed them yet, as a rule.
        seed_devices(&primary, &devices).await.expect("seeded");
        let (code, body) = cluster.send(&json!({"topics": [topic], "body": "fresh"})).await;
        assert_eq!(code, 202, "{body}");
        let id = body["id"].as_str().expect("an id");
        let status = cluster
            .wait_for_status(id, Duration::from_secs(60), |s| {
                s["jobs"]["planned"].as_u64() > Some(0) && s["jobs"]["done"] == s["jobs"]["planned"]
            })
            .await;
        let harvested = status["audience"]["total"].as_u64().unwrap_or(0);
        missed += PER_SEND.saturating_sub(harvested);
    }
    // The standby's own statistics: rows fetched from the test database
    // there can only be the harvester's (flushed by its sessions within
    // seconds of their queries).
    let (standby, connection) = tokio_postgres::connect(&pair.standby_url(&cluster.db.name), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let fetched_on_standby = loop {
        let fetched: i64 = standby
            .query_one(
                "SELECT coalesce(sum(tup_fetched), 0)::bigint FROM pg_stat_database WHERE datname = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if fetched > 0 || std::time::Instant::now() > deadline {
            break fetched;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!(
        "sends {SENDS} of {PER_SEND} fresh devices each: missed {missed}; rows fetched on the standby {fetched_on_standby}"
    );
    assert_eq!(missed, 0, "every device registered before its send was harvested");
    assert!(fetched_on_standby > 0, "the standby served the harvest");
    cluster.stop().await;
}
