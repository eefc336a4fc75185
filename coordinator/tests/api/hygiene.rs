//! Data hygiene: stale registrations purged (topic counts follow), detail
//! rows of old finished notifications removed while their status still
//! answers with the same figures, one replica at a time, in bounded batches.
//!
//! The runs are started by the tests (the schedule is off, except in the
//! test of the schedule itself); "old" is made by moving timestamps back
//! in SQL.

use std::time::{Duration, Instant};

use clarion_coordinator::hygiene::{HygienePlan, HygieneReport, Outcome, run};
use clarion_coordinator::progress::completion::Valve;
use clarion_coordinator::progress::{Cleaned, Recorded, record_cleanup, record_delivery, record_job};
use clarion_coordinator::store::hygiene::{DETAIL_TABLES, try_lock};
use clarion_proto::{
    AcceptBucket, ApnsEnvironment, BatchId, CleanupReason, DeliveryCounts, DeliveryReport, JobOutcome,
    JobReport, Platform, TokenCleanup, WireVersion,
};
use clarion_runtime::PgPool;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_postgres::{Client, NoTls};
use uuid::Uuid;

use crate::common::*;

const DAY: Duration = Duration::from_secs(86_400);
const VALVE: Valve = Valve {
    gone: 0.2,
    invalid: 0.05,
};
/// The schedule is the tests' to drive, and topic counts are never cached.
const MANUAL: [&str; 2] = ["--hygiene-interval-secs=0", "--topic-count-max-age-secs=0"];

fn plan(max_age_days: Option<u64>, retention_days: Option<u64>, batch: u32) -> HygienePlan {
    HygienePlan {
        registration_max_age: max_age_days.map(|days| DAY * days as u32),
        detail_retention: retention_days.map(|days| DAY * days as u32),
        batch,
        budget: Duration::from_secs(120),
        yield_to_sends: true,
    }
}

async fn connect(app: &TestCoordinator) -> Client {
    let (client, connection) = tokio_postgres::connect(&app.db.url, NoTls)
        .await
        .expect("database connection");
    tokio::spawn(connection);
    client
}

async fn run_once(app: &TestCoordinator, plan: &HygienePlan) -> HygieneReport {
    let client = connect(app).await;
    let mut cursor = 0;
    match run(&client, plan, &mut cursor).await.expect("hygiene runs") {
        Outcome::Ran(report) => report,
        Outcome::Skipped => panic!("nobody else holds the hygiene lock"),
    }
}

async fn subscribers(app: &TestCoordinator, topic: &str) -> u64 {
    let body: Value = app
        .get(&format!("/api/v1/topics/{topic}"), SEND_KEY)
        .await
        .json()
        .await
        .expect("topic size");
    body["subscribers"].as_u64().expect("a count")
}

async fn age_registrations(client: &Client, token: &str, topic: Option<&str>, days: u32) {
    let moved = client
        .execute(
            "UPDATE registrations SET updated_at = now() - make_interval(days => $3)
              WHERE token = $1 AND ($2::text IS NULL OR topic = $2)",
            &[&token, &topic, &(days as i32)],
        )
        .await
        .expect("registrations aged");
    assert!(moved > 0, "{token} has rows to age");
}

#[actix_web::test]
async fn devices_not_refreshed_within_the_maximum_age_are_purged_and_topic_counts_follow() {
    let app = TestCoordinator::start_with(&MANUAL).await;
    let client = connect(&app).await;
    let stale = ios_token(1);
    let fresh = android_token(2);
    let partly_fresh = ios_token(3);
    let re_registered = android_token(4);
    for (token, platform) in [
        (&stale, "ios"),
        (&fresh, "android"),
        (&partly_fresh, "ios"),
        (&re_registered, "android"),
    ] {
        let response = app
            .put_registration(token, registration(platform, &["hyg/news", "hyg/sport"]))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    age_registrations(&client, &stale, None, 300).await;
    // One topic refreshed (a follow) keeps the whole device.
    age_registrations(&client, &partly_fresh, Some("hyg/news"), 300).await;
    // A PUT of the registration refreshes every row of it.
    age_registrations(&client, &re_registered, None, 300).await;
    let response = app
        .put_registration(
            &re_registered,
            registration("android", &["hyg/news", "hyg/sport"]),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(subscribers(&app, "hyg/news").await, 4);

    let report = run_once(&app, &plan(Some(270), None, 5000)).await;
    assert_eq!(report.registrations_purged, 2, "{report:?}");
    assert!(report.purge_pass_done, "{report:?}");
    let gone = app
        .get(&format!("/api/v1/registrations/{stale}"), REGISTER_KEY)
        .await;
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
    for kept in [&fresh, &partly_fresh, &re_registered] {
        let read: Value = app
            .get(&format!("/api/v1/registrations/{kept}"), REGISTER_KEY)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(read["topics"], json!(["hyg/news", "hyg/sport"]), "{kept}");
    }
    assert_eq!(subscribers(&app, "hyg/news").await, 3);
    assert_eq!(subscribers(&app, "hyg/sport").await, 3);

    // A maximum age longer than anyone's silence purges nothing.
    let report = run_once(&app, &plan(Some(400), None, 5000)).await;
    assert_eq!(report.registrations_purged, 0, "{report:?}");
    app.stop().await;
}

#[actix_web::test]
async fn a_purge_larger_than_a_batch_takes_several_statements_none_over_the_batch() {
    let app = TestCoordinator::start_with(&MANUAL).await;
    let client = connect(&app).await;
    let stale: Vec<String> = (0..60).map(ios_token).collect();
    let kept: Vec<String> = (100..110).map(android_token).collect();
    let topics = ["hyg/a", "hyg/b"];
    // 120 stale rows in SQL (the API would take longer to say the same).
    for (tokens, platform) in [(&stale, "ios"), (&kept, "android")] {
        for token in tokens.iter() {
            let shard = clarion_proto::shard_of(token) as i16;
            client
                .execute(
                    "INSERT INTO registrations (topic, shard, token, platform)
                     SELECT unnest($1::text[]), $2, $3, $4",
                    &[&&topics[..], &shard, token, &platform],
                )
                .await
                .unwrap();
        }
    }
    client
        .execute(
            "UPDATE registrations SET updated_at = now() - interval '300 days' WHERE platform = 'ios'",
            &[],
        )
        .await
        .unwrap();

    let report = run_once(&app, &plan(Some(270), None, 7)).await;
    assert_eq!(report.registrations_purged, 120, "{report:?}");
    assert!(report.largest_statement <= 7, "{report:?}");
    assert!(report.statements >= 120 / 7, "{report:?}");
    let left: i64 = client
        .query_one("SELECT count(*) FROM registrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 20);
    assert_eq!(subscribers(&app, "hyg/a").await, 10);
    app.stop().await;
}

/// Reports what a harvester and dispatchers would: each job harvested one
/// batch of two tokens, delivered (one push of each accepted), with the
/// harvester's ledger row; the last batch's second token answered invalid
/// and held (the valve decides at completion). With `every_batch` false
/// the last job harvested a second batch that never reports: the
/// notification stays in flight.
async fn report_progress(pool: &PgPool, client: &Client, id: Uuid, jobs: u32, every_batch: bool) {
    for job_index in 0..jobs {
        let report = JobReport {
            v: WireVersion::CURRENT,
            notification_id: id,
            job_index,
            outcome: JobOutcome::Harvested {
                devices: two_ios_devices(),
                batches: if every_batch || job_index + 1 < jobs { 1 } else { 2 },
            },
        };
        assert!(matches!(
            record_job(pool, &report, VALVE).await.unwrap(),
            Recorded::Counted(_)
        ));
        client
            .execute(
                "INSERT INTO published_batches (notification_id, job_index, seq, digest) VALUES ($1, $2, 0, 42)",
                &[&id, &(job_index as i32)],
            )
            .await
            .unwrap();
        let last = job_index + 1 == jobs;
        if last {
            let cleanup = TokenCleanup {
                v: WireVersion::CURRENT,
                notification_id: id,
                platform: Platform::Ios,
                environment: ApnsEnvironment::Production,
                reason: CleanupReason::Invalid,
                tokens: vec![ios_token(1000 + u64::from(job_index))],
            };
            assert_eq!(record_cleanup(pool, &cleanup).await.unwrap(), Cleaned::Held(1));
        }
        let delivery = DeliveryReport {
            v: WireVersion::CURRENT,
            batch_id: BatchId {
                notification_id: id,
                job_index,
                seq: 0,
            },
            platform: Platform::Ios,
            environment: ApnsEnvironment::Production,
            counts: DeliveryCounts {
                sent: if last { 1 } else { 2 },
                invalid: u32::from(last),
                ..DeliveryCounts::default()
            },
            first_accept_at: None,
            last_accept_at: None,
            refused: None,
            accepts: vec![
                AcceptBucket {
                    after_ms: 40 + 10 * job_index,
                    count: 1,
                },
                AcceptBucket {
                    after_ms: 90 + 10 * job_index,
                    count: u32::from(!last),
                },
            ],
        };
        assert!(matches!(
            record_delivery(pool, &delivery, VALVE).await.unwrap(),
            Recorded::Counted(_)
        ));
    }
}

/// Rows per detail table the notification has.
async fn detail_rows(client: &Client, id: Uuid) -> Vec<(&'static str, i64)> {
    let mut rows = Vec::new();
    for table in DETAIL_TABLES {
        let count: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE notification_id = $1"),
                &[&id],
            )
            .await
            .unwrap()
            .get(0);
        rows.push((table, count));
    }
    rows
}

async fn age_notification(client: &Client, id: Uuid, days: u32) {
    client
        .execute(
            "UPDATE notifications SET updated_at = now() - make_interval(days => $2) WHERE id = $1",
            &[&id, &(days as i32)],
        )
        .await
        .unwrap();
}

/// A topic followed by `devices` iOS devices (so sends are planned).
async fn audience(app: &TestCoordinator, topic: &str, devices: u64) {
    for n in 0..devices {
        let response = app
            .put_registration(&ios_token(5000 + n), registration("ios", &[topic]))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
    }
}

#[actix_web::test]
async fn old_finished_notifications_lose_their_details_and_their_status_still_answers() {
    let app = TestCoordinator::start_with(&MANUAL).await;
    let pool = clarion_runtime::db::pool(
        &app.db.settings(2),
        &clarion_runtime::Trust::load(&clarion_runtime::TlsSettings::default()).unwrap(),
        "hygiene-test",
    )
    .unwrap();
    let client = connect(&app).await;
    audience(&app, "hyg/news", 3).await;

    // Complete, a month and more ago.
    let (complete, jobs) = send_planned(&app, "hyg/news").await;
    report_progress(&pool, &client, complete, jobs, true).await;
    // Failed by the watchdog with a batch unreported: its timings were
    // never stored, the status computes them from the accept times.
    let (failed, failed_jobs) = send_planned(&app, "hyg/news").await;
    report_progress(&pool, &client, failed, failed_jobs, false).await;
    client
        .execute(
            "UPDATE notifications SET status = 'failed', failure_reason = 'stalled' WHERE id = $1",
            &[&failed],
        )
        .await
        .unwrap();
    // Complete, but recent.
    let (recent, recent_jobs) = send_planned(&app, "hyg/news").await;
    report_progress(&pool, &client, recent, recent_jobs, true).await;
    // Still in flight (a batch unreported) and idle for as long.
    let (in_flight, in_flight_jobs) = send_planned(&app, "hyg/news").await;
    report_progress(&pool, &client, in_flight, in_flight_jobs, false).await;

    for id in [complete, failed, in_flight] {
        age_notification(&client, id, 40).await;
    }
    let before_complete = status_of(&app, complete).await;
    let before_failed = status_of(&app, failed).await;
    assert_eq!(before_complete["status"], "complete", "{before_complete}");
    assert_eq!(before_failed["status"], "failed", "{before_failed}");
    assert!(
        before_failed["timings"]["t50_ms"].as_u64().is_some(),
        "live timings from the accept times: {before_failed}"
    );
    assert_eq!(status_of(&app, in_flight).await["status"], "dispatching");
    let held: i64 = client
        .query_one(
            "SELECT count(*) FROM held_tokens WHERE notification_id = $1",
            &[&failed],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, 1, "the failed notification still holds a token");
    let kept_before = [
        detail_rows(&client, recent).await,
        detail_rows(&client, in_flight).await,
    ];
    let mut expected_rows = 0;
    for id in [complete, failed] {
        expected_rows += detail_rows(&client, id).await.iter().map(|(_, n)| n).sum::<i64>();
    }
    assert!(expected_rows >= 8, "{expected_rows}");

    let report = run_once(&app, &plan(None, Some(30), 5000)).await;
    assert_eq!(report.notifications_trimmed, 2, "{report:?}");
    assert_eq!(report.detail_rows_total() as i64, expected_rows, "{report:?}");
    for id in [complete, failed] {
        for (table, rows) in detail_rows(&client, id).await {
            assert_eq!(rows, 0, "{table} of {id}");
        }
    }
    assert_eq!(status_of(&app, complete).await, before_complete);
    assert_eq!(status_of(&app, failed).await, before_failed);
    let kept_after = [
        detail_rows(&client, recent).await,
        detail_rows(&client, in_flight).await,
    ];
    assert_eq!(
        kept_after, kept_before,
        "recent and in-flight notifications keep everything"
    );
    assert!(kept_after[1].iter().any(|(_, rows)| *rows > 0));

    // Done once: the next run finds nothing to do.
    let report = run_once(&app, &plan(None, Some(30), 5000)).await;
    assert_eq!(report.notifications_trimmed, 0, "{report:?}");
    assert_eq!(report.detail_rows_total(), 0, "{report:?}");
    app.stop().await;
}

#[actix_web::test]
async fn details_larger_than_a_batch_go_in_several_statements_none_over_the_batch() {
    let app = TestCoordinator::start_with(&MANUAL).await;
    let pool = clarion_runtime::db::pool(
        &app.db.settings(2),
        &clarion_runtime::Trust::load(&clarion_runtime::TlsSettings::default()).unwrap(),
        "hygiene-test",
    )
    .unwrap();
    let client = connect(&app).await;
    audience(&app, "hyg/many", 1).await;
    let (id, jobs) = send_planned(&app, "hyg/many").await;
    report_progress(&pool, &client, id, jobs, true).await;
    client
        .execute(
            "INSERT INTO notification_accepts (notification_id, after_ms, accepted)
             SELECT $1, 100000 + 10 * n, 1 FROM generate_series(1, 50) AS n",
            &[&id],
        )
        .await
        .unwrap();
    age_notification(&client, id, 31).await;
    let before: i64 = detail_rows(&client, id).await.iter().map(|(_, n)| n).sum();
    assert!(before > 50, "{before}");

    let report = run_once(&app, &plan(None, Some(30), 4)).await;
    assert_eq!(report.detail_rows_total() as i64, before, "{report:?}");
    assert!(report.largest_statement <= 4, "{report:?}");
    assert!(report.statements as i64 >= before / 4, "{report:?}");
    assert!(detail_rows(&client, id).await.iter().all(|(_, n)| *n == 0));
    app.stop().await;
}

#[actix_web::test]
async fn one_session_at_a_time_holds_the_hygiene_lock_and_the_other_skips() {
    let app = TestCoordinator::start_with(&MANUAL).await;
    let replica_a = connect(&app).await;
    let replica_b = connect(&app).await;
    let taken = futures::future::join_all([try_lock(&replica_a), try_lock(&replica_b)]).await;
    let winners = taken.iter().filter(|took| matches!(took, Ok(true))).count();
    assert_eq!(winners, 1, "{taken:?}");
    let (holder, other) = if matches!(taken[0], Ok(true)) {
        (replica_a, replica_b)
    } else {
        (replica_b, replica_a)
    };
    let mut cursor = 0;
    let outcome = run(&other, &plan(Some(270), Some(30), 5000), &mut cursor)
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Skipped);
    // The lock is the session's: it goes with it.
    drop(holder);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match run(&other, &plan(Some(270), Some(30), 5000), &mut cursor)
            .await
            .unwrap()
        {
            Outcome::Ran(_) => break,
            Outcome::Skipped => {
                assert!(Instant::now() < deadline, "the lock outlived its session");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    // A run gives the lock back.
    assert!(try_lock(&connect(&app).await).await.unwrap());
    app.stop().await;
}

#[actix_web::test]
async fn the_coordinator_runs_hygiene_on_its_schedule() {
    let app =
        TestCoordinator::start_with(&["--hygiene-interval-secs=1", "--topic-count-max-age-secs=0"]).await;
    let client = connect(&app).await;
    let token = android_token(77);
    app.put_registration(&token, registration("android", &["hyg/sched"]))
        .await;
    age_registrations(&client, &token, None, 271).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while subscribers(&app, "hyg/sched").await > 0 {
        assert!(Instant::now() < deadline, "no scheduled run purged the device");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gone = app
        .get(&format!("/api/v1/registrations/{token}"), REGISTER_KEY)
        .await;
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
    app.stop().await;
}

/// A harvested job's devices: two on iOS.
fn two_ios_devices() -> clarion_proto::PerPlatform<u64> {
    let mut devices = clarion_proto::PerPlatform::default();
    devices[clarion_proto::Platform::Ios] = 2;
    devices
}

#[actix_web::test]
async fn a_run_gives_way_to_a_send_going_on_but_not_to_a_stalled_one() {
    let app = TestCoordinator::start_with(&MANUAL).await;
    let client = connect(&app).await;
    let stale = ios_token(40);
    let response = app
        .put_registration(&stale, registration("ios", &["hyg/yield"]))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    age_registrations(&client, &stale, None, 300).await;
    // Planned and never reported (no harvester here): in flight.
    let (sending, _) = send_planned(&app, "hyg/yield").await;
    let status = status_of(&app, sending).await;
    assert!(
        ["accepted", "harvesting", "dispatching"].contains(&status["status"].as_str().unwrap_or("")),
        "{status}"
    );

    let report = run_once(&app, &plan(Some(270), Some(30), 5000)).await;
    assert!(report.yielded, "{report:?}");
    assert_eq!(report.registrations_purged, 0, "{report:?}");
    assert!(!report.purge_pass_done, "{report:?}");
    assert_eq!(subscribers(&app, "hyg/yield").await, 1);

    // No progress for longer than SEND_RECENT: stalled, the watchdog's.
    client
        .execute(
            "UPDATE notifications SET updated_at = now() - interval '10 minutes' WHERE id = $1",
            &[&sending],
        )
        .await
        .unwrap();
    let report = run_once(&app, &plan(Some(270), Some(30), 5000)).await;
    assert!(!report.yielded, "{report:?}");
    assert_eq!(report.registrations_purged, 1, "{report:?}");
    assert!(report.purge_pass_done, "{report:?}");
    assert_eq!(subscribers(&app, "hyg/yield").await, 0);
    app.stop().await;
}
