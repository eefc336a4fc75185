//! The group commit of registration writes and receipts, through the HTTP
//! API: concurrent writes share transactions (counted on `/metrics`), a
//! write the database refuses fails only its own request, and a full queue
//! answers 503 with `Retry-After` at once. (Its own test binary: the
//! metrics recorder is process-wide; the tests take turns.)

#[allow(dead_code)]
#[path = "api/common.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use futures::future::join_all;
use reqwest::{Method, StatusCode};
use serde_json::json;

/// The tests read process-wide counters: one at a time.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const REGISTRATION_BATCHES: &str = "clarion_write_batches_total{kind=\"registrations\"}";
const RECEIPT_BATCHES: &str = "clarion_write_batches_total{kind=\"receipts\"}";

#[actix_web::test]
async fn concurrent_registration_writes_and_receipts_share_transactions() {
    let _turn = TURN.lock().await;
    clarion_runtime::metrics::install().expect("the metrics recorder installs");
    let app = TestCoordinator::start_with(&["--write-batch-wait-ms=20"]).await;
    let before = metric(&app, REGISTRATION_BATCHES).await;
    const WRITES: u64 = 200;
    let answers = join_all((0..WRITES).map(|n| {
        let body = registration("ios", &["gc/a", "gc/b"]);
        let token = ios_token(n);
        let app = &app;
        async move { app.put_registration(&token, body).await.status() }
    }))
    .await;
    assert!(
        answers.iter().all(|status| *status == StatusCode::OK),
        "{answers:?}"
    );
    let batches = metric(&app, REGISTRATION_BATCHES).await - before;
    let stored: i64 = app
        .sql()
        .await
        .query_one(
            "SELECT count(DISTINCT token) FROM registrations WHERE topic = 'gc/b'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    println!("registration writes: {WRITES} answered 200, {stored} stored, {batches} batch transactions");
    assert_eq!(stored, WRITES as i64, "every acknowledged write is stored");
    assert!(
        batches >= 1.0 && batches < (WRITES / 4) as f64,
        "{batches} batches for {WRITES} writes"
    );

    // Receipts: counted by the same kind of batcher, in fewer
    // transactions than requests, each counted once.
    app.sql()
        .await
        .execute("UPDATE registrations SET receipts = true", &[])
        .await
        .unwrap();
    let (id, _) = send_planned(&app, "gc/a").await;
    let before = metric(&app, RECEIPT_BATCHES).await;
    let answers = join_all((0..WRITES).map(|n| {
        let body = json!({"receipts": [{"notification_id": id, "token": ios_token(n), "event": "received"}]});
        let app = &app;
        async move {
            let response = app
                .request(Method::POST, "/api/v1/receipts", Some(REGISTER_KEY))
                .json(&body)
                .send()
                .await
                .expect("request sent");
            (response.status(), response.json::<serde_json::Value>().await.ok())
        }
    }))
    .await;
    for (status, body) in &answers {
        assert_eq!(*status, StatusCode::ACCEPTED, "{body:?}");
        assert_eq!(
            body.as_ref().map(|b| b["accepted"].clone()),
            Some(json!(1)),
            "{body:?}"
        );
    }
    let batches = metric(&app, RECEIPT_BATCHES).await - before;
    println!("receipts: {WRITES} requests answered 202, {batches} batch transactions");
    assert!(
        batches >= 1.0 && batches < (WRITES / 4) as f64,
        "{batches} batches for {WRITES} requests"
    );
    app.stop().await;
}

#[actix_web::test]
async fn a_registration_the_database_refuses_fails_alone() {
    let _turn = TURN.lock().await;
    clarion_runtime::metrics::install().expect("the metrics recorder installs");
    // One batch worker and a long wait: the writes share a batch.
    let app =
        TestCoordinator::start_with(&["--write-batch-wait-ms=100", "--write-batches-in-flight=1"]).await;
    // A rule the API does not know, so only PostgreSQL refuses the row.
    app.sql()
        .await
        .batch_execute(
            "ALTER TABLE registrations ADD CONSTRAINT refused_in_test CHECK (topic <> 'gc/poison')",
        )
        .await
        .unwrap();
    let retries = "clarion_write_batch_retries_total{kind=\"registrations\"}";
    let before = metric(&app, retries).await;
    let answers = join_all((0..20u64).map(|n| {
        let topic = if n == 7 { "gc/poison" } else { "gc/fine" };
        let body = registration("ios", &[topic]);
        let token = ios_token(n);
        let app = &app;
        async move { app.put_registration(&token, body).await.status() }
    }))
    .await;
    for (n, status) in answers.iter().enumerate() {
        let expected = if n == 7 {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        };
        assert_eq!(*status, expected, "write {n}: {answers:?}");
    }
    let stored: Vec<String> = app
        .sql()
        .await
        .query("SELECT token FROM registrations", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(stored.len(), 19, "the others are stored");
    assert!(!stored.contains(&ios_token(7)));
    assert!(
        metric(&app, retries).await > before,
        "the batch was run again write by write"
    );
    app.stop().await;
}

#[actix_web::test]
async fn a_full_write_queue_answers_503_with_retry_after_at_once_and_keeps_what_it_took() {
    let _turn = TURN.lock().await;
    clarion_runtime::metrics::install().expect("the metrics recorder installs");
    let app = TestCoordinator::start_with(&[
        "--write-queue-rows=2",
        "--write-batches-in-flight=1",
        "--write-batch-wait-ms=0",
    ])
    .await;
    // The first writes wait on the table, and fill the queue behind them.
    let blocker = app.sql().await;
    blocker
        .batch_execute("BEGIN; LOCK TABLE registrations IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let shed = "clarion_write_shed_requests_total{kind=\"registrations\"}";
    let shed_before = metric(&app, shed).await;
    // Six writes at once: one is taken by the batch worker (stuck on the
    // table), one waits in the queue, which is then full: four are refused.
    let app = std::sync::Arc::new(app);
    let writes: Vec<_> = (0..6u64)
        .map(|n| {
            let app = app.clone();
            tokio::spawn(async move {
                let response = app
                    .put_registration(&ios_token(n), registration("ios", &["gc/q"]))
                    .await;
                let retry_after = response.headers().get("retry-after").cloned();
                let status = response.status();
                (status, retry_after, response.text().await.unwrap_or_default())
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while writes.iter().filter(|write| write.is_finished()).count() < 4 {
        assert!(Instant::now() < deadline, "the refusals did not come at once");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut refused = 0;
    let mut pending = Vec::new();
    for write in writes {
        if !write.is_finished() {
            pending.push(write);
            continue;
        }
        let (status, retry_after, body) = write.await.unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(retry_after.is_some(), "a 503 says when to retry");
        let problem: serde_json::Value = serde_json::from_str(&body).expect("a problem document");
        assert_eq!(problem["type"], "urn:clarion:problem:unavailable", "{problem}");
        refused += 1;
    }
    assert_eq!(
        (refused, pending.len()),
        (4, 2),
        "two writes held by a queue of two rows"
    );
    assert!(metric(&app, shed).await >= shed_before + 4.0, "counted as shed");
    blocker.batch_execute("COMMIT").await.unwrap();
    for write in pending {
        let (status, _, body) = write.await.unwrap();
        assert_eq!(status, StatusCode::OK, "a write taken is written: {body}");
    }
    let stored: i64 = app
        .sql()
        .await
        .query_one("SELECT count(*) FROM registrations WHERE topic = 'gc/q'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 2);
}

#[actix_web::test]
async fn one_receipt_in_two_requests_of_a_batch_counts_once() {
    let _turn = TURN.lock().await;
    clarion_runtime::metrics::install().expect("the metrics recorder installs");
    // One batch worker and a long wait: the requests share a batch.
    let app =
        TestCoordinator::start_with(&["--write-batch-wait-ms=100", "--write-batches-in-flight=1"]).await;
    let body = json!({"platform": "ios", "topics": ["gc/r"], "receipts": true});
    assert_eq!(
        app.put_registration(&ios_token(1), body).await.status(),
        StatusCode::OK
    );
    let (id, _) = send_planned(&app, "gc/r").await;
    let before = metric(&app, RECEIPT_BATCHES).await;
    // Each request also repeats the receipt within itself.
    let receipt = json!({"notification_id": id, "token": ios_token(1), "event": "received"});
    let body = json!({"receipts": [receipt, receipt]});
    let answers = join_all((0..2).map(|_| {
        let (app, body) = (&app, &body);
        async move {
            let response = app
                .request(Method::POST, "/api/v1/receipts", Some(REGISTER_KEY))
                .json(body)
                .send()
                .await
                .expect("request sent");
            assert_eq!(response.status(), StatusCode::ACCEPTED);
            response.json::<serde_json::Value>().await.expect("a JSON answer")
        }
    }))
    .await;
    let total = |field: &str| {
        answers
            .iter()
            .map(|a| a[field].as_u64().unwrap_or(99))
            .sum::<u64>()
    };
    let batches = metric(&app, RECEIPT_BATCHES).await - before;
    println!("two requests in {batches} batch(es): {answers:?}");
    assert_eq!(
        (total("accepted"), total("duplicates"), total("ignored")),
        (1, 3, 0),
        "{answers:?}"
    );
    let stored: i64 = app
        .sql()
        .await
        .query_one(
            "SELECT coalesce(sum(received), 0)::bigint FROM notification_receipt_counts WHERE notification_id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 1, "counted once in the aggregates");
    app.stop().await;
}
