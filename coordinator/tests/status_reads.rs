//! Status and curve reads: however many poll, each notification's status
//! and curve are computed at most once per `CLARION_STATUS_REFRESH_MS`
//! (counted on `/metrics`), an `If-None-Match` with the current ETag is a
//! 304 that computes nothing, a change shows within the interval, and an
//! unknown id stays a 404 that is never kept. (Its own test binary: the
//! metrics recorder is process-wide; the tests take turns.)

#[allow(dead_code)]
#[path = "api/common.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use futures::future::join_all;
use reqwest::{Method, StatusCode};
use uuid::Uuid;

/// The tests read process-wide counters: one at a time.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const STATUS_COMPUTATIONS: &str = "clarion_coordinator_status_computations_total{view=\"status\"}";
const CURVE_COMPUTATIONS: &str = "clarion_coordinator_status_computations_total{view=\"curve\"}";

/// Pollers asking at once.
const POLLERS: usize = 200;

/// A notification sent to a topic one device follows (no harvester runs,
/// so it stays `harvesting` until something changes it).
async fn sent(app: &TestCoordinator) -> Uuid {
    let topic = format!("reads/{}", Uuid::now_v7().simple());
    let response = app
        .put_registration(&ios_token(1), registration("ios", &[&topic]))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let response = app.send(SEND_KEY, &[&topic]).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let body: serde_json::Value = response.json().await.expect("send answer");
    body["id"].as_str().and_then(|id| id.parse().ok()).expect("an id")
}

/// `path` asked by `POLLERS` pollers at once: their statuses and ETags.
async fn poll_at_once(app: &TestCoordinator, path: &str) -> Vec<(StatusCode, Option<String>)> {
    join_all((0..POLLERS).map(|_| async {
        let response = app.get(path, SEND_KEY).await;
        let etag = response
            .headers()
            .get("etag")
            .and_then(|etag| etag.to_str().ok())
            .map(str::to_owned);
        (response.status(), etag)
    }))
    .await
}

#[actix_web::test]
async fn two_hundred_pollers_share_one_computation_and_a_matching_etag_computes_nothing() {
    let _turn = TURN.lock().await;
    clarion_runtime::metrics::install().expect("the metrics recorder installs");
    // A long interval: every request of this test falls within one, however
    // slow the box.
    let app = TestCoordinator::start_with(&["--status-refresh-ms=60000"]).await;
    let id = sent(&app).await;
    for (path, series) in [
        (format!("/api/v1/notifications/{id}"), STATUS_COMPUTATIONS),
        (format!("/api/v1/notifications/{id}/curve"), CURVE_COMPUTATIONS),
    ] {
        let before = metric(&app, series).await;
        let answers = poll_at_once(&app, &path).await;
        let computed = metric(&app, series).await - before;
        println!("{path}: {POLLERS} pollers at once, {computed} computations");
        assert!(
            answers.iter().all(|(status, _)| *status == StatusCode::OK),
            "{answers:?}"
        );
        let etag = answers[0].1.clone().expect("an ETag");
        assert!(
            answers.iter().all(|(_, e)| e.as_deref() == Some(&etag)),
            "one ETag for all"
        );
        // Single flight: one computation; 2 leaves room for none of this
        // test's doing (the metric counts every computation of the view).
        assert!(
            (1.0..=2.0).contains(&computed),
            "{computed} computations of {path}"
        );

        let before = metric(&app, series).await;
        let response = app
            .request(Method::GET, &path, Some(SEND_KEY))
            .header("If-None-Match", &etag)
            .send()
            .await
            .expect("request sent");
        assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(
            response.headers().get("etag").and_then(|e| e.to_str().ok()),
            Some(etag.as_str())
        );
        assert_eq!(metric(&app, series).await - before, 0.0, "a 304 computes nothing");
    }
    app.stop().await;
}

#[actix_web::test]
async fn pollers_over_several_intervals_cost_one_computation_an_interval() {
    let _turn = TURN.lock().await;
    clarion_runtime::metrics::install().expect("the metrics recorder installs");
    let refresh = Duration::from_millis(250);
    let app = TestCoordinator::start_with(&["--status-refresh-ms=250"]).await;
    let id = sent(&app).await;
    let status_path = format!("/api/v1/notifications/{id}");
    let curve_path = format!("/api/v1/notifications/{id}/curve");
    let (status_before, curve_before) = (
        metric(&app, STATUS_COMPUTATIONS).await,
        metric(&app, CURVE_COMPUTATIONS).await,
    );
    // Each poller asks status and curve in turn, as the console's progress
    // page does, with the ETags it got, for a bounded time and count.
    let run_for = Duration::from_secs(3);
    let started = Instant::now();
    let served = join_all((0..POLLERS).map(|_| async {
        let mut etags: [Option<String>; 2] = [None, None];
        let mut answered = 0u32;
        while started.elapsed() < run_for && answered < 10_000 {
            for (path, etag) in [&status_path, &curve_path].into_iter().zip(etags.iter_mut()) {
                let mut request = app.request(Method::GET, path, Some(SEND_KEY));
                if let Some(tag) = etag.as_deref() {
                    request = request.header("If-None-Match", tag);
                }
                let response = request.send().await.expect("request sent");
                let status = response.status();
                assert!(
                    status == StatusCode::OK || status == StatusCode::NOT_MODIFIED,
                    "{status}"
                );
                *etag = response
                    .headers()
                    .get("etag")
                    .and_then(|e| e.to_str().ok())
                    .map(str::to_owned);
                answered += 1;
            }
        }
        answered
    }))
    .await;
    let elapsed = started.elapsed();
    let status_computed = metric(&app, STATUS_COMPUTATIONS).await - status_before;
    let curve_computed = metric(&app, CURVE_COMPUTATIONS).await - curve_before;
    let served: u32 = served.iter().sum();
    let seconds = elapsed.as_secs_f64();
    println!(
        "{POLLERS} pollers for {seconds:.1} s at a {refresh:?} refresh: {served} answers ({:.0}/s); \
         status computed {status_computed} times ({:.1}/s), curve {curve_computed} ({:.1}/s)",
        f64::from(served) / seconds,
        status_computed / seconds,
        curve_computed / seconds,
    );
    // A computation is stored for one interval; the next begins only once
    // it has expired: at most one per interval, plus the first.
    let most = (elapsed.as_secs_f64() / refresh.as_secs_f64()).floor() + 1.0;
    assert!(
        status_computed >= 1.0 && status_computed <= most,
        "{status_computed} > {most}"
    );
    assert!(
        curve_computed >= 1.0 && curve_computed <= most,
        "{curve_computed} > {most}"
    );
    app.stop().await;
}

#[actix_web::test]
async fn a_change_shows_within_the_refresh_interval() {
    let _turn = TURN.lock().await;
    let app = TestCoordinator::start_with(&["--status-refresh-ms=1000"]).await;
    let id = sent(&app).await;
    let path = format!("/api/v1/notifications/{id}");
    let response = app.get(&path, SEND_KEY).await;
    assert_eq!(response.status(), StatusCode::OK);
    let old_etag = response.headers().get("etag").cloned().expect("an ETag");
    let before: serde_json::Value = response.json().await.expect("a status");
    assert_eq!(before["status"], "harvesting", "{before}");
    // Cancelled through another coordinator: this one learns it only when
    // its snapshot expires.
    let replica = app.replica().await;
    let response = app
        .http
        .post(format!(
            "http://{}/api/v1/notifications/{id}/cancel",
            replica.addr()
        ))
        .bearer_auth(SEND_KEY)
        .send()
        .await
        .expect("request sent");
    assert_eq!(response.status(), StatusCode::OK);
    let cancelled_at = Instant::now();
    // The interval plus slack for a busy box.
    let deadline = cancelled_at + Duration::from_secs(30);
    loop {
        let status = status_of(&app, id).await;
        if status["status"] == "cancelled" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {} after the cancel",
            status["status"]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("the cancel showed {:?} after it", cancelled_at.elapsed());
    replica.stop().await;
    // A new ETag for the new status: a poller holding the old one gets 200.
    let response = app
        .request(Method::GET, &path, Some(SEND_KEY))
        .header("If-None-Match", old_etag)
        .send()
        .await
        .expect("request sent");
    assert_eq!(response.status(), StatusCode::OK);
    app.stop().await;
}

#[actix_web::test]
async fn a_cancel_through_this_coordinator_shows_at_once() {
    let _turn = TURN.lock().await;
    // An interval longer than the test: only forgetting the snapshot can
    // show the cancel.
    let app = TestCoordinator::start_with(&["--status-refresh-ms=600000"]).await;
    let id = sent(&app).await;
    assert_eq!(status_of(&app, id).await["status"], "harvesting");
    let response = app
        .request(
            Method::POST,
            &format!("/api/v1/notifications/{id}/cancel"),
            Some(SEND_KEY),
        )
        .send()
        .await
        .expect("request sent");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(status_of(&app, id).await["status"], "cancelled");
    app.stop().await;
}

#[actix_web::test]
async fn an_unknown_id_is_a_404_that_is_never_kept() {
    let _turn = TURN.lock().await;
    clarion_runtime::metrics::install().expect("the metrics recorder installs");
    let app = TestCoordinator::start_with(&["--status-refresh-ms=60000"]).await;
    let unknown = Uuid::now_v7();
    let before = metric(&app, STATUS_COMPUTATIONS).await;
    for _ in 0..3 {
        let response = app
            .get(&format!("/api/v1/notifications/{unknown}"), SEND_KEY)
            .await;
        expect_problem(response, StatusCode::NOT_FOUND, "not-found").await;
    }
    // Each asked anew: a 404 takes no entry (so unknown ids cannot fill the
    // cache), and one sent later is found at once.
    assert_eq!(metric(&app, STATUS_COMPUTATIONS).await - before, 3.0);
    let topic = "reads/later";
    let response = app
        .put_registration(&ios_token(2), registration("ios", &[topic]))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let response = app
        .request(Method::POST, "/api/v1/notifications", Some(SEND_KEY))
        .json(&serde_json::json!({"id": unknown, "topics": [topic], "body": "now it exists"}))
        .send()
        .await
        .expect("request sent");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(status_of(&app, unknown).await["id"], unknown.to_string());
    let answers = poll_at_once(&app, &format!("/api/v1/notifications/{}/curve", Uuid::now_v7())).await;
    assert!(answers.iter().all(|(status, _)| *status == StatusCode::NOT_FOUND));
    app.stop().await;
}
