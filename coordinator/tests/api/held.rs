//! Held deletions: an admin looks at, releases or discards the tokens a
//! tripped safety valve kept. (The valve tripping for real is tested with
//! the whole pipeline in load-tests; here the held rows are written
//! directly.)

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::*;

const TOPIC: &str = "breaking";

/// A notification whose valve kept `ios/production`, with the first three
/// iOS tokens held as gone and the Android token held as invalid.
async fn notification_with_held_tokens(app: &TestCoordinator) -> (String, Vec<String>, String) {
    let ios: Vec<String> = (1..=4).map(ios_token).collect();
    let android = android_token(1);
    for token in &ios {
        assert_eq!(
            app.put_registration(token, registration("ios", &[TOPIC]))
                .await
                .status(),
            StatusCode::OK
        );
    }
    assert_eq!(
        app.put_registration(&android, registration("android", &[TOPIC]))
            .await
            .status(),
        StatusCode::OK
    );
    let sent: Value = app.send(SEND_KEY, &[TOPIC]).await.json().await.unwrap();
    let id = sent["id"].as_str().unwrap().to_owned();
    let sql = app.sql().await;
    let uuid: uuid::Uuid = id.parse().unwrap();
    sql.execute(
        "UPDATE notifications SET status = 'complete', invalid_decision = 'keep',
                suspect_segments = '{ios/production}', completed_at = now() WHERE id = $1",
        &[&uuid],
    )
    .await
    .unwrap();
    let held = &ios[..3];
    sql.execute(
        "INSERT INTO held_tokens (notification_id, token, reason, segment)
         SELECT $1, unnest($2::text[]), 'unregistered', 'ios/production'",
        &[&uuid, &held],
    )
    .await
    .unwrap();
    sql.execute(
        "INSERT INTO held_tokens (notification_id, token, reason, segment) VALUES ($1, $2, 'invalid', 'android')",
        &[&uuid, &android],
    )
    .await
    .unwrap();
    (id, ios, android)
}

async fn post(app: &TestCoordinator, path: &str, key: &str) -> reqwest::Response {
    app.request(Method::POST, path, Some(key)).send().await.unwrap()
}

async fn is_registered(app: &TestCoordinator, token: &str) -> bool {
    let status = app
        .get(&format!("/api/v1/registrations/{token}"), REGISTER_KEY)
        .await
        .status();
    assert!(
        status == StatusCode::OK || status == StatusCode::NOT_FOUND,
        "{status}"
    );
    status == StatusCode::OK
}

#[actix_web::test]
async fn held_tokens_are_counted_then_discarded_or_released_once() {
    let app = TestCoordinator::start().await;
    let (id, ios, android) = notification_with_held_tokens(&app).await;
    let held_path = format!("/api/v1/notifications/{id}/held");

    let held: Value = app.get(&held_path, ADMIN_KEY).await.json().await.unwrap();
    assert_eq!(held["decided"], true);
    assert_eq!(held["suspect_segments"], json!(["ios/production"]));
    assert_eq!(
        held["segments"],
        json!([
            {"segment": "android", "gone": 0, "invalid": 1, "total": 1},
            {"segment": "ios/production", "gone": 3, "invalid": 0, "total": 3},
        ])
    );
    assert_eq!(held["total"], 4);

    // Discarding Android's keeps its registration.
    let discarded: Value = post(&app, &format!("{held_path}/discard?segment=android"), ADMIN_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(discarded["tokens"], 1);
    assert_eq!(discarded["registrations_deleted"], 0);
    assert!(is_registered(&app, &android).await);

    // Releasing the rest deletes exactly the held iOS registrations.
    let released = post(&app, &format!("{held_path}/release"), ADMIN_KEY).await;
    assert_eq!(released.status(), StatusCode::OK);
    let released: Value = released.json().await.unwrap();
    assert_eq!(released["tokens"], 3);
    assert_eq!(released["registrations_deleted"], 3);
    for token in &ios[..3] {
        assert!(!is_registered(&app, token).await, "released {token}");
    }
    assert!(is_registered(&app, &ios[3]).await, "never held");
    assert!(is_registered(&app, &android).await, "discarded, not released");
    let status: Value = app
        .get(&format!("/api/v1/notifications/{id}"), SEND_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(status["cleanup"]["registrations_deleted"], 3);

    // Both are idempotent.
    for verdict in ["release", "discard"] {
        let again: Value = post(&app, &format!("{held_path}/{verdict}"), ADMIN_KEY)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            (again["tokens"].as_u64(), again["registrations_deleted"].as_u64()),
            (Some(0), Some(0))
        );
    }
    let held: Value = app.get(&held_path, ADMIN_KEY).await.json().await.unwrap();
    assert_eq!(held["total"], 0);

    // Audited, with what they did.
    let audit: Value = app
        .get("/api/v1/audit?action=held.release", ADMIN_KEY)
        .await
        .json()
        .await
        .unwrap();
    let details: Vec<&str> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["detail"].as_str().unwrap())
        .collect();
    assert_eq!(
        details,
        vec![
            "segment=all tokens=0 registrations_deleted=0",
            "segment=all tokens=3 registrations_deleted=3"
        ]
    );
    let audit: Value = app
        .get("/api/v1/audit?action=held.discard", ADMIN_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(audit["records"][1]["target"], id.as_str());
    assert_eq!(
        audit["records"][1]["detail"],
        "segment=android tokens=1 registrations_deleted=0"
    );
    app.stop().await;
}

#[actix_web::test]
async fn held_tokens_are_for_admins_and_only_once_the_valve_judged() {
    let app = TestCoordinator::start().await;
    let (id, _, _) = notification_with_held_tokens(&app).await;
    let held_path = format!("/api/v1/notifications/{id}/held");
    expect_problem(
        app.get(&held_path, SEND_KEY).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
    expect_problem(
        post(&app, &format!("{held_path}/release"), SEND_KEY).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
    let unknown = format!("/api/v1/notifications/{}/held/release", uuid::Uuid::new_v4());
    expect_problem(
        post(&app, &unknown, ADMIN_KEY).await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    // An empty or made-up segment (a typo) is refused, never "0 released".
    for segment in ["", "Android", "ios-production"] {
        let bad = format!("{held_path}/release?segment={segment}");
        expect_problem(
            post(&app, &bad, ADMIN_KEY).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-request",
        )
        .await;
    }

    // A notification still in flight: its tokens are the valve's to judge.
    let sent: Value = app.send(SEND_KEY, &[TOPIC]).await.json().await.unwrap();
    let open = format!(
        "/api/v1/notifications/{}/held/release",
        sent["id"].as_str().unwrap()
    );
    expect_problem(
        post(&app, &open, ADMIN_KEY).await,
        StatusCode::CONFLICT,
        "conflict",
    )
    .await;
    let held: Value = app.get(&held_path, ADMIN_KEY).await.json().await.unwrap();
    assert_eq!(held["total"], 4, "nothing released");
    app.stop().await;
}
