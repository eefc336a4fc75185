//! Device receipts (issue 35): `POST /api/v1/receipts` — what counts, what
//! is a duplicate, what is ignored, clamping of device clocks, the verdict
//! fixed at two minutes, refusals naming the field, 503 while PostgreSQL
//! is unreachable — and the device figures in the status and the curve.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use reqwest::{Method, Response, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common::*;

/// Longest a test waits for the settler (it looks every 2 s).
const SETTLE_PATIENCE: Duration = Duration::from_secs(20);

async fn post_receipts(app: &TestCoordinator, body: &Value) -> Response {
    app.request(Method::POST, "/api/v1/receipts", Some(REGISTER_KEY))
        .json(body)
        .send()
        .await
        .expect("request sent")
}

async fn counted(app: &TestCoordinator, body: &Value) -> Value {
    let response = post_receipts(app, body).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    response.json().await.unwrap()
}

fn receipt(id: Uuid, token: &str, event: &str) -> Value {
    json!({"notification_id": id, "token": token, "event": event})
}

async fn register(app: &TestCoordinator, token: &str, topic: &str, receipts: bool) {
    let response = app
        .put_registration(
            token,
            json!({"platform": "ios", "topics": [topic], "receipts": receipts}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
}

/// Sends to `topic` and returns the notification's id.
async fn send(app: &TestCoordinator, topic: &str) -> Uuid {
    let response = app.send(SEND_KEY, &[topic]).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().parse().unwrap()
}

/// The status once the settler counted the reporting audience (and, with
/// `verdict`, stored the device-side 90in2).
async fn settled_status(app: &TestCoordinator, id: Uuid, verdict: bool) -> Value {
    let started = Instant::now();
    loop {
        let status = status_of(app, id).await;
        let sql = app.sql().await;
        let row = sql
            .query_opt(
                "SELECT ninety_in_two FROM notification_device_summary WHERE notification_id = $1",
                &[&id],
            )
            .await
            .unwrap();
        let done = match row {
            Some(row) => !verdict || row.get::<_, Option<bool>>(0).is_some(),
            None => false,
        };
        if done {
            return status_of(app, id).await;
        }
        assert!(started.elapsed() < SETTLE_PATIENCE, "not settled: {status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[actix_web::test]
async fn registrations_say_whether_they_report_receipts() {
    let app = TestCoordinator::start().await;
    let token = ios_token(1);
    register(&app, &token, "breaking/uk", true).await;
    let body: Value = app
        .get(&format!("/api/v1/registrations/{token}"), REGISTER_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["receipts"], true);
    let response = app
        .put_registration(&token, registration("ios", &["breaking/uk"]))
        .await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["receipts"], false, "absent means false: {body}");
    app.stop().await;
}

#[actix_web::test]
async fn receipts_count_once_per_device_and_event_and_the_rest_is_duplicate_or_ignored() {
    let app = TestCoordinator::start().await;
    let (a, b, quiet, outsider) = (ios_token(1), ios_token(2), ios_token(3), ios_token(4));
    register(&app, &a, "breaking/uk", true).await;
    register(&app, &b, "breaking/uk", true).await;
    register(&app, &quiet, "breaking/uk", false).await;
    register(&app, &outsider, "sport/football", true).await;
    let id = send(&app, "breaking/uk").await;
    let body = json!({"receipts": [
        receipt(id, &a, "received"),
        receipt(id, &a, "received"),
        receipt(id, &b, "opened"),
        receipt(id, &quiet, "received"),
        receipt(id, &outsider, "received"),
        receipt(Uuid::new_v4(), &a, "received"),
    ]});
    let first = counted(&app, &body).await;
    assert_eq!(first, json!({"accepted": 2, "duplicates": 1, "ignored": 3}));
    // A retry of the whole request counts nothing twice.
    let replay = counted(&app, &body).await;
    assert_eq!(replay, json!({"accepted": 0, "duplicates": 3, "ignored": 3}));
    // B's open counted as its receipt too: a late `received` is a duplicate.
    let late = counted(
        &app,
        &json!({"receipts": [receipt(id, &b, "received"), receipt(id, &a, "opened")]}),
    )
    .await;
    assert_eq!(late, json!({"accepted": 1, "duplicates": 1, "ignored": 0}));

    let status = settled_status(&app, id, false).await;
    let device = &status["device"];
    assert_eq!(device["reporting"], 2, "{status}");
    assert_eq!(device["received"], 2);
    assert_eq!(device["opened"], 2);
    assert_eq!(device["received_percent"], 100.0);
    assert_eq!(device["opened_percent"], 100.0);
    assert_eq!(device["buckets"]["30"], 2);
    assert_eq!(device["buckets"]["300"], 2);
    assert!(device["t90_ms"].as_u64().is_some(), "{device}");
    assert_eq!(
        device["ninety_in_two"],
        Value::Null,
        "open for two minutes: {device}"
    );

    let curve: Value = app
        .get(&format!("/api/v1/notifications/{id}/curve"), SEND_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert!(curve["accepted"].is_array(), "{curve}");
    let last = |name: &str| curve[name].as_array().and_then(|points| points.last()).cloned();
    assert_eq!(last("received").unwrap()[1], 1.0, "{curve}");
    assert_eq!(last("opened").unwrap()[1], 1.0, "{curve}");
    app.stop().await;
}

#[actix_web::test]
async fn device_clocks_are_clamped_to_the_send_and_the_arrival() {
    let app = TestCoordinator::start().await;
    let (early, late, none) = (ios_token(1), ios_token(2), ios_token(3));
    for token in [&early, &late, &none] {
        register(&app, token, "breaking/uk", true).await;
    }
    let id = send(&app, "breaking/uk").await;
    let sql = app.sql().await;
    let sent_at: DateTime<Utc> = sql
        .query_one("SELECT created_at FROM notifications WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    let before = Utc::now();
    let mut skewed_early = receipt(id, &early, "received");
    skewed_early["at"] = json!("2001-01-01T00:00:00Z");
    let mut skewed_late = receipt(id, &late, "received");
    skewed_late["at"] = json!("2099-01-01T00:00:00Z");
    let answer = counted(
        &app,
        &json!({"receipts": [skewed_early, skewed_late, receipt(id, &none, "received")]}),
    )
    .await;
    let after = Utc::now();
    assert_eq!(answer["accepted"], 3);
    let times = |token: &str| {
        let sql = &sql;
        let token = token.to_owned();
        async move {
            sql.query_one(
                "SELECT received_at FROM device_receipts WHERE notification_id = $1 AND token = $2",
                &[&id, &token],
            )
            .await
            .unwrap()
            .get::<_, DateTime<Utc>>(0)
        }
    };
    assert_eq!(
        times(&early).await,
        sent_at,
        "a clock in the past is clamped to the send"
    );
    let clamped_late = times(&late).await;
    assert!(
        clamped_late >= before && clamped_late <= after,
        "a clock in the future is clamped to the arrival"
    );
    let arrival = times(&none).await;
    assert!(arrival >= before && arrival <= after, "no `at`: the arrival");
    app.stop().await;
}

#[actix_web::test]
async fn a_late_receipt_moves_counts_and_t_figures_but_never_the_verdict() {
    let app = TestCoordinator::start().await;
    let (a, b) = (ios_token(1), ios_token(2));
    register(&app, &a, "breaking/uk", true).await;
    register(&app, &b, "breaking/uk", true).await;
    let id = send(&app, "breaking/uk").await;
    // The send was ten minutes ago and nobody reported within two minutes.
    let sql = app.sql().await;
    sql.execute(
        "UPDATE notifications SET created_at = created_at - interval '10 minutes' WHERE id = $1",
        &[&id],
    )
    .await
    .unwrap();
    let status = settled_status(&app, id, true).await;
    assert_eq!(status["device"]["ninety_in_two"], false, "{status}");
    assert_eq!(status["device"]["t50_ms"], Value::Null);
    // Two phones that were offline report with early times.
    let sent_at: DateTime<Utc> = sql
        .query_one("SELECT created_at FROM notifications WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    let at = (sent_at + chrono::Duration::seconds(5)).to_rfc3339();
    let answer = counted(
        &app,
        &json!({"receipts": [
            {"notification_id": id, "token": a, "event": "received", "at": at},
            {"notification_id": id, "token": b, "event": "opened", "at": at},
        ]}),
    )
    .await;
    assert_eq!(answer["accepted"], 2);
    let device = status_of(&app, id).await["device"].clone();
    assert_eq!(device["received"], 2);
    assert_eq!(device["opened"], 1);
    assert_eq!(
        device["t90_ms"], 5_100,
        "the end of the 100 ms bin holding 5 s: {device}"
    );
    assert_eq!(device["buckets"]["30"], 2);
    assert_eq!(device["ninety_in_two"], false, "fixed at two minutes: {device}");
    app.stop().await;
}

#[actix_web::test]
async fn refusals_name_the_field_and_more_than_five_hundred_is_too_large() {
    let app = TestCoordinator::start().await;
    let id = Uuid::new_v4();
    let token = ios_token(1);
    let problem = expect_problem(
        post_receipts(&app, &json!({"receipts": [receipt(id, &token, "seen")]})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    assert!(
        problem["detail"].as_str().unwrap().contains("receipts[0].event"),
        "{problem}"
    );
    let mut bad = receipt(id, &token, "received");
    bad["notification_id"] = json!(42);
    let problem = expect_problem(
        post_receipts(&app, &json!({"receipts": [receipt(id, &token, "opened"), bad]})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("receipts[1].notification_id"),
        "{problem}"
    );
    let problem = expect_problem(
        post_receipts(&app, &json!({"receipts": []})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
    assert!(
        problem["detail"].as_str().unwrap().contains("`receipts`"),
        "{problem}"
    );

    let five_hundred = json!({"receipts": vec![receipt(id, &token, "received"); 500]});
    assert_eq!(counted(&app, &five_hundred).await["ignored"], 500);
    let five_hundred_and_one = json!({"receipts": vec![receipt(id, &token, "received"); 501]});
    expect_problem(
        post_receipts(&app, &five_hundred_and_one).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
    )
    .await;

    let not_json = app
        .request(Method::POST, "/api/v1/receipts", Some(REGISTER_KEY))
        .header("content-type", "application/json")
        .body("{receipts")
        .send()
        .await
        .unwrap();
    expect_problem(not_json, StatusCode::BAD_REQUEST, "malformed-request").await;
    // The document states the token rule, so schemathesis sends good ones.
    let doc: Value = app
        .get("/api/v1/openapi.json", SEND_KEY)
        .await
        .json()
        .await
        .unwrap();
    let token_rule = &doc["components"]["schemas"]["ReceiptItem"]["properties"]["token"];
    assert!(token_rule["pattern"].is_string(), "{token_rule}");
    let wrong_scope = app
        .request(Method::POST, "/api/v1/receipts", Some(SEND_KEY))
        .json(&json!({"receipts": [receipt(id, &token, "received")]}))
        .send()
        .await
        .unwrap();
    expect_problem(wrong_scope, StatusCode::FORBIDDEN, "forbidden").await;
    app.stop().await;
}

#[actix_web::test]
async fn while_postgresql_refuses_connections_receipts_get_503_and_the_retry_counts_once() {
    let app = TestCoordinator::start_with(&["--database-connect-timeout-secs=1"]).await;
    let token = ios_token(1);
    register(&app, &token, "breaking/uk", true).await;
    let id = send(&app, "breaking/uk").await;
    let body = json!({"receipts": [receipt(id, &token, "received")]});
    // PostgreSQL refuses new connections to the database and drops the
    // coordinator's: as far as the coordinator can tell, it is down.
    let admin_url = std::env::var(clarion_runtime::testing::ADMIN_URL_VAR)
        .unwrap_or_else(|_| clarion_runtime::testing::DEFAULT_ADMIN_URL.to_owned());
    let (sql, connection) = tokio_postgres::connect(&admin_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    actix_web::rt::spawn(connection);
    let database = app.db.name.clone();
    sql.batch_execute(&format!("ALTER DATABASE \"{database}\" ALLOW_CONNECTIONS false"))
        .await
        .unwrap();
    sql.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
        &[&database],
    )
    .await
    .unwrap();
    let refused = post_receipts(&app, &body).await;
    let retry_after = refused.headers().get("retry-after").cloned();
    expect_problem(refused, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
    assert!(retry_after.is_some(), "a 503 says when to retry");
    sql.batch_execute(&format!("ALTER DATABASE \"{database}\" ALLOW_CONNECTIONS true"))
        .await
        .unwrap();
    // The app retries until it gets an answer; the receipt counts once.
    let started = Instant::now();
    let answer = loop {
        let response = post_receipts(&app, &body).await;
        if response.status() == StatusCode::ACCEPTED {
            break response.json::<Value>().await.unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{}",
            response.status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(answer, json!({"accepted": 1, "duplicates": 0, "ignored": 0}));
    assert_eq!(counted(&app, &body).await["duplicates"], 1);
    app.stop().await;
}

#[actix_web::test]
async fn hygiene_removes_the_per_device_rows_and_the_status_keeps_the_device_figures() {
    use clarion_coordinator::hygiene::{HygienePlan, Outcome, run};
    let app = TestCoordinator::start_with(&["--hygiene-interval-secs=0"]).await;
    let (a, b) = (ios_token(1), ios_token(2));
    register(&app, &a, "breaking/uk", true).await;
    register(&app, &b, "breaking/uk", true).await;
    let id = send(&app, "breaking/uk").await;
    let body = json!({"receipts": [receipt(id, &a, "received"), receipt(id, &b, "opened")]});
    assert_eq!(counted(&app, &body).await["accepted"], 2);
    settled_status(&app, id, false).await;
    // Finished and idle for longer than the retention of 30 days.
    let sql = app.sql().await;
    sql.execute(
        "UPDATE notifications SET status = 'complete', completed_at = now(),
                updated_at = now() - interval '40 days' WHERE id = $1",
        &[&id],
    )
    .await
    .unwrap();
    let plan = HygienePlan {
        registration_max_age: None,
        detail_retention: Some(Duration::from_secs(30 * 86_400)),
        batch: 100,
        budget: Duration::from_secs(120),
        yield_to_sends: true,
    };
    let mut cursor = 0;
    assert!(matches!(
        run(&sql, &plan, &mut cursor).await.unwrap(),
        Outcome::Ran(_)
    ));
    let rows: i64 = sql
        .query_one(
            "SELECT count(*) FROM device_receipts WHERE notification_id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "per-device receipts go with the details");
    let device = status_of(&app, id).await["device"].clone();
    assert_eq!(device["reporting"], 2, "{device}");
    assert_eq!(device["received"], 2);
    assert_eq!(device["opened"], 1);
    assert_eq!(device["buckets"]["30"], 2);
    // Its details gone, a receipt for it is ignored.
    let late = json!({"receipts": [receipt(id, &a, "opened")]});
    assert_eq!(
        counted(&app, &late).await,
        json!({"accepted": 0, "duplicates": 0, "ignored": 1})
    );
    app.stop().await;
}

#[actix_web::test]
async fn a_key_limited_to_other_apps_cannot_count_receipts() {
    let dir = std::env::temp_dir().join(format!("clarion-receipts-keys-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.toml");
    std::fs::write(
        &keys,
        "[keys.desk]\nkey = \"desk-s3cret\"\nscopes = [\"send\", \"register\"]\n\
         [keys.puzzles]\nkey = \"puzzles-s3cret\"\nscopes = [\"register\"]\napps = [\"puzzles\"]\n",
    )
    .unwrap();
    let apps = dir.join("apps.toml");
    std::fs::write(
        &apps,
        "[apps.puzzles]\nfcm_credentials_file = \"/nowhere/sa.json\"\n",
    )
    .unwrap();
    let app = TestCoordinator::start_keyed(vec![
        format!("--api-keys-file={}", keys.display()),
        format!("--apps-file={}", apps.display()),
    ])
    .await;
    let token = ios_token(1);
    let registered = app
        .request(
            Method::PUT,
            &format!("/api/v1/registrations/{token}"),
            Some("desk-s3cret"),
        )
        .json(&json!({"platform": "ios", "topics": ["breaking/uk"], "receipts": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), StatusCode::OK);
    let sent: Value = app
        .send("desk-s3cret", &["breaking/uk"])
        .await
        .json()
        .await
        .unwrap();
    let id: Uuid = sent["id"].as_str().unwrap().parse().unwrap();
    let body = json!({"receipts": [receipt(id, &token, "received")]});
    let post = |key: &'static str| {
        app.request(Method::POST, "/api/v1/receipts", Some(key))
            .json(&body)
            .send()
    };
    let other_app: Value = post("puzzles-s3cret").await.unwrap().json().await.unwrap();
    assert_eq!(other_app, json!({"accepted": 0, "duplicates": 0, "ignored": 1}));
    let own_app: Value = post("desk-s3cret").await.unwrap().json().await.unwrap();
    assert_eq!(own_app, json!({"accepted": 1, "duplicates": 0, "ignored": 0}));
    app.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
