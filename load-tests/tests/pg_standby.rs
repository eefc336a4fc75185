//! The PostgreSQL primary and streaming standby of the test kit, and the
//! rule a replica read rests on: a row committed on the primary before
//! position L is seen on the standby once it has replayed L. Many times:
//! insert, take the primary's LSN, read on the standby at once (which
//! may miss the row: replication is asynchronous) and after waiting for
//! the LSN (which must not).

use std::time::Duration;

use clarion_load_tests::testkit::pg_standby::PgStandbyPair;
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
