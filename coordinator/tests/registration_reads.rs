//! Registration reads from memory, never staler than the read: two
//! coordinators on one database, a write acknowledged by one is seen by the
//! very next read on the other (no wait), a delete is a 404 there at once,
//! and a lost listening session turns the cache off until it is back.
//! (Its own test binary: the metrics recorder is process-wide; the tests
//! take turns.)

#[allow(dead_code)]
#[path = "api/common.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// The tests read process-wide counters: one at a time.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const HITS: &str = "clarion_coordinator_registration_reads_total{outcome=\"hit\"}";

/// `GET /api/v1/registrations/{token}` on the coordinator at `base`.
async fn read(app: &TestCoordinator, base: &str, token: &str) -> (StatusCode, Value) {
    let response = app
        .http
        .get(format!("{base}/api/v1/registrations/{token}"))
        .bearer_auth(REGISTER_KEY)
        .send()
        .await
        .expect("request sent");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Every series of `name` on the first coordinator's `/metrics`, for a
/// failure's message.
async fn metric_lines(app: &TestCoordinator, name: &str) -> String {
    let response = app.request(Method::GET, "/metrics", None).send().await;
    let text = match response {
        Ok(response) => response.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    text.lines()
        .filter(|line| line.starts_with(name))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Reads `token` on `base` until a read is served from memory (the
/// coordinator is listening and has the entry); panics after a minute.
async fn until_served_from_memory(app: &TestCoordinator, base: &str, token: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let before = metric(app, HITS).await;
        let (status, _) = read(app, base, token).await;
        assert_eq!(status, StatusCode::OK);
        if metric(app, HITS).await > before {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no read of {base} was served from memory"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[actix_web::test]
async fn a_write_on_one_coordinator_is_read_at_once_on_another() {
    let _turn = TURN.lock().await;
    clarion_runtime::metrics::install().expect("the metrics recorder installs");
    let app = TestCoordinator::start().await;
    let replica = app.replica().await;
    let other = format!("http://{}", replica.addr());
    let token = ios_token(7);
    let response = app
        .put_registration(&token, registration("ios", &["ryw/0"]))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    until_served_from_memory(&app, &other, &token).await;

    // Each write acknowledged by the first is what the second answers
    // next, with no wait: the second proves it has caught up first.
    let hits_before = metric(&app, HITS).await;
    const ROUNDS: u32 = 30;
    for round in 1..=ROUNDS {
        let topic = format!("ryw/{round}");
        let response = app.put_registration(&token, registration("ios", &[&topic])).await;
        assert_eq!(response.status(), StatusCode::OK);
        let (status, body) = read(&app, &other, &token).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            body["topics"],
            serde_json::json!([topic]),
            "round {round}: {body}"
        );
        // A read again: from memory when no change came meanwhile.
        let (_, again) = read(&app, &other, &token).await;
        assert_eq!(
            again["topics"],
            serde_json::json!([topic]),
            "round {round}: {again}"
        );
    }
    let hits = metric(&app, HITS).await - hits_before;
    println!("{ROUNDS} writes, each read twice on the other coordinator: {hits} reads from memory");
    assert!(hits >= 1.0, "the cache served nothing");

    let response = app
        .request(
            Method::DELETE,
            &format!("/api/v1/registrations/{token}"),
            Some(REGISTER_KEY),
        )
        .send()
        .await
        .expect("request sent");
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let (status, body) = read(&app, &other, &token).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    replica.stop().await;
    app.stop().await;
}

#[actix_web::test]
async fn a_lost_listening_session_turns_the_cache_off_until_it_is_back() {
    let _turn = TURN.lock().await;
    clarion_runtime::metrics::install().expect("the metrics recorder installs");
    let app = TestCoordinator::start().await;
    let token = ios_token(8);
    let response = app
        .put_registration(&token, registration("ios", &["lost/a"]))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    until_served_from_memory(&app, &app.base, &token).await;

    // The listening session ends, and a change comes that no notice tells
    // of (triggers off): only turning the cache off keeps it honest.
    let sql = app.sql().await;
    let ended = sql
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'clarion-coordinator-listener' AND datname = current_database()",
            &[],
        )
        .await
        .expect("listener ended");
    assert_eq!(ended, 1, "one listening session");
    sql.batch_execute(&format!(
        "ALTER TABLE registrations DISABLE TRIGGER registrations_deleted_notice; \
         DELETE FROM registrations WHERE token = '{token}'; \
         ALTER TABLE registrations ENABLE TRIGGER registrations_deleted_notice"
    ))
    .await
    .expect("silent delete");
    let (status, body) = read(&app, &app.base, &token).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "served what was kept before the loss: {body}"
    );

    // Back by itself: reads are served from memory again.
    let response = app
        .put_registration(&token, registration("ios", &["lost/b"]))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    until_served_from_memory(&app, &app.base, &token).await;
    let (_, body) = read(&app, &app.base, &token).await;
    assert_eq!(body["topics"], serde_json::json!(["lost/b"]));
    app.stop().await;
}

#[actix_web::test]
async fn a_statement_over_many_devices_drops_only_theirs() {
    let _turn = TURN.lock().await;
    clarion_runtime::metrics::install().expect("the metrics recorder installs");
    let app = TestCoordinator::start().await;
    let replica = app.replica().await;
    let other = format!("http://{}", replica.addr());
    let (kept, named) = (ios_token(21), ios_token(22));
    for token in [&kept, &named] {
        let response = app
            .put_registration(token, registration("ios", &["many/a"]))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        until_served_from_memory(&app, &other, token).await;
    }

    // One statement inserts 200 devices and another changes 201 (`named`
    // among them), as a group commit batch or a bulk fix does; their keys,
    // with 1,000-character tokens, need several notices each.
    let sql = app.sql().await;
    let inserted = sql
        .execute(
            "INSERT INTO registrations (topic, shard, token, platform) \
             SELECT 'many/bulk', 0, 'bulk' || n || repeat('x', 1000), 'android' \
             FROM generate_series(1, 200) AS n",
            &[],
        )
        .await
        .expect("the bulk insert");
    assert_eq!(inserted, 200);
    let updated = sql
        .execute(
            "UPDATE registrations SET locale = 'fr' WHERE topic = 'many/bulk' OR token = $1",
            &[&named],
        )
        .await
        .expect("the bulk update");
    assert_eq!(updated, 201);

    // A device neither statement touched is still read from memory ...
    let hits_before = metric(&app, HITS).await;
    let (status, body) = read(&app, &other, &kept).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let outcomes = metric_lines(&app, "clarion_coordinator_registration_reads_total").await;
    assert!(
        metric(&app, HITS).await > hits_before,
        "the statements over many devices dropped an entry they did not touch: {outcomes}"
    );
    // ... and one they named shows the change at once.
    let (status, body) = read(&app, &other, &named).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["locale"], "fr", "{body}");
    replica.stop().await;
    app.stop().await;
}
