//! Delivery reports counted many to a transaction: each report counts once
//! however often it comes (twice in one write, or again in a later one), a
//! report of an unknown notification is only acknowledged, each
//! notification's totals and accept times add up, and each completes once,
//! with the last of its reports.

use clarion_coordinator::progress::completion::Valve;
use clarion_coordinator::progress::{Recorded, record_deliveries, record_job};
use clarion_proto::{
    AcceptBucket, ApnsEnvironment, BatchId, DeliveryCounts, DeliveryReport, JobOutcome, JobReport, Platform,
    WireVersion,
};
use clarion_runtime::PgPool;
use reqwest::StatusCode;
use uuid::Uuid;

use crate::common::*;

const VALVE: Valve = Valve {
    gone: 0.2,
    invalid: 0.05,
};

/// Every job of `id` harvested one batch of two iPhones, published.
async fn harvest(app: &TestCoordinator, pool: &PgPool, id: Uuid, jobs: u32) {
    let sql = app.sql().await;
    for job_index in 0..jobs {
        let report = JobReport {
            v: WireVersion::CURRENT,
            notification_id: id,
            job_index,
            outcome: JobOutcome::Harvested {
                devices: two_ios_devices(),
                batches: 1,
            },
        };
        assert!(matches!(
            record_job(pool, &report, VALVE).await.unwrap(),
            Recorded::Counted(None)
        ));
        sql.execute(
            "INSERT INTO published_batches (notification_id, job_index, seq, digest) VALUES ($1, $2, 0, 42)",
            &[&id, &(job_index as i32)],
        )
        .await
        .unwrap();
    }
}

/// Batch 0 of job `job_index` of `id`: both pushes accepted, 30 ms and
/// 70 ms after the send.
fn delivered(id: Uuid, job_index: u32) -> DeliveryReport {
    DeliveryReport {
        v: WireVersion::CURRENT,
        batch_id: BatchId {
            notification_id: id,
            job_index,
            seq: 0,
        },
        platform: Platform::Ios,
        environment: ApnsEnvironment::Production,
        counts: DeliveryCounts {
            sent: 2,
            ..DeliveryCounts::default()
        },
        first_accept_at: None,
        last_accept_at: None,
        refused: None,
        accepts: vec![
            AcceptBucket {
                after_ms: 30,
                count: 1,
            },
            AcceptBucket {
                after_ms: 70,
                count: 1,
            },
        ],
    }
}

#[actix_web::test]
async fn many_reports_in_one_write_each_count_once_and_each_notification_completes_once() {
    let app = TestCoordinator::start().await;
    let pool = clarion_runtime::db::pool(
        &app.db.settings(2),
        &clarion_runtime::Trust::load(&clarion_runtime::TlsSettings::default()).unwrap(),
        "reports-test",
    )
    .unwrap();
    for n in 0..4 {
        let response = app
            .put_registration(&ios_token(7000 + n), registration("ios", &["rep/news"]))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    let (first, first_jobs) = send_planned(&app, "rep/news").await;
    let (second, second_jobs) = send_planned(&app, "rep/news").await;
    harvest(&app, &pool, first, first_jobs).await;
    harvest(&app, &pool, second, second_jobs).await;

    // Interleaved, one repeated within the write, one for a notification
    // that does not exist.
    let mut reports = Vec::new();
    for job in 0..first_jobs.max(second_jobs) {
        if job < first_jobs {
            reports.push(delivered(first, job));
        }
        if job < second_jobs {
            reports.push(delivered(second, job));
        }
    }
    let repeated = reports.len();
    reports.push(delivered(first, 0));
    reports.push(delivered(Uuid::new_v4(), 0));
    let recorded = record_deliveries(&pool, &reports, VALVE).await.unwrap();

    assert_eq!(recorded.len(), reports.len());
    assert_eq!(recorded[repeated], Recorded::Duplicate);
    assert_eq!(recorded[repeated + 1], Recorded::UnknownNotification);
    for id in [first, second] {
        let last = reports[..repeated]
            .iter()
            .rposition(|r| r.batch_id.notification_id == id)
            .unwrap();
        for (i, fate) in recorded[..repeated].iter().enumerate() {
            if reports[i].batch_id.notification_id != id {
                continue;
            }
            match fate {
                Recorded::Counted(Some(_)) => assert_eq!(i, last, "completed by its last report"),
                Recorded::Counted(None) => assert_ne!(i, last, "the last report completes it"),
                other => panic!("report {i} was {other:?}"),
            }
        }
    }

    let sql = app.sql().await;
    for (id, jobs) in [(first, first_jobs), (second, second_jobs)] {
        let status = status_of(&app, id).await;
        assert_eq!(status["status"], "complete", "{status}");
        assert_eq!(status["delivery"]["ios"]["sent"], 2 * u64::from(jobs), "{status}");
        let accepts: Vec<(i32, i64)> = sql
            .query(
                "SELECT after_ms, accepted FROM notification_accepts WHERE notification_id = $1 ORDER BY after_ms",
                &[&id],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        assert_eq!(accepts, [(30, i64::from(jobs)), (70, i64::from(jobs))]);
    }

    // The same write again (a redelivery after a lost ack): nothing counts.
    let again = record_deliveries(&pool, &reports, VALVE).await.unwrap();
    assert!(
        again[..=repeated].iter().all(|fate| *fate == Recorded::Duplicate),
        "{again:?}"
    );
    assert_eq!(
        status_of(&app, first).await["delivery"]["ios"]["sent"],
        2 * u64::from(first_jobs)
    );
}

/// A harvested job's devices: two on iOS.
fn two_ios_devices() -> clarion_proto::PerPlatform<u64> {
    let mut devices = clarion_proto::PerPlatform::default();
    devices[clarion_proto::Platform::Ios] = 2;
    devices
}
