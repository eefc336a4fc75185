//! Topic sizes: counted per platform, cached no longer than configured.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::*;

#[actix_web::test]
async fn topic_sizes_are_counted_per_platform() {
    let app = TestCoordinator::start().await;
    for n in 0..3 {
        app.put_registration(
            &ios_token(n),
            registration("ios", &["breaking/uk", "breaking/us"]),
        )
        .await;
    }
    for n in 0..2 {
        app.put_registration(&android_token(n), registration("android", &["breaking/uk"]))
            .await;
    }
    let uk: Value = app
        .get("/api/v1/topics/breaking/uk", SEND_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        uk,
        json!({"topic": "breaking/uk", "subscribers": 5, "ios": 3, "android": 2, "web": 0})
    );
    let us: Value = app
        .get("/api/v1/topics/breaking/us", ADMIN_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(us["subscribers"], 3);
    let nobody: Value = app
        .get("/api/v1/topics/nobody/follows", SEND_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(nobody["subscribers"], 0);
    app.stop().await;
}

#[actix_web::test]
async fn cached_counts_are_served_until_they_reach_the_configured_age() {
    // A day-long bound makes the cache visible: the second answer is the cached one.
    let cached = TestCoordinator::start_with(&["--topic-count-max-age-secs=86400"]).await;
    cached
        .put_registration(&ios_token(1), registration("ios", &["t"]))
        .await;
    let first: Value = cached
        .get("/api/v1/topics/t", SEND_KEY)
        .await
        .json()
        .await
        .unwrap();
    cached
        .put_registration(&ios_token(2), registration("ios", &["t"]))
        .await;
    let second: Value = cached
        .get("/api/v1/topics/t", SEND_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (first["subscribers"].clone(), second["subscribers"].clone()),
        (json!(1), json!(1))
    );
    cached.stop().await;

    // With a zero bound every answer is fresh.
    let fresh = TestCoordinator::start_with(&["--topic-count-max-age-secs=0"]).await;
    fresh
        .put_registration(&ios_token(1), registration("ios", &["t"]))
        .await;
    let first: Value = fresh
        .get("/api/v1/topics/t", SEND_KEY)
        .await
        .json()
        .await
        .unwrap();
    fresh
        .put_registration(&ios_token(2), registration("ios", &["t"]))
        .await;
    let second: Value = fresh
        .get("/api/v1/topics/t", SEND_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (first["subscribers"].clone(), second["subscribers"].clone()),
        (json!(1), json!(2))
    );
    fresh.stop().await;
}

#[actix_web::test]
async fn malformed_topic_names_are_refused() {
    let app = TestCoordinator::start().await;
    let response = app.get("/api/v1/topics/breaking//uk", SEND_KEY).await;
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
    app.stop().await;
}

#[actix_web::test]
async fn a_topic_not_counted_yet_is_planned_by_its_size() {
    // Ten tokens a job: a topic of one device is one job, one of 25
    // (counted when planned: the topic counter has no count yet) three.
    let app = TestCoordinator::start_with(&["--tokens-per-job=10"]).await;
    let put = app
        .put_registration(&ios_token(1), registration("ios", &["cold/one"]))
        .await;
    assert_eq!(put.status(), StatusCode::OK);
    for n in 0..25 {
        let put = app
            .put_registration(&android_token(n), registration("android", &["cold/many"]))
            .await;
        assert_eq!(put.status(), StatusCode::OK);
    }
    // Sent at once: the topic counter has never been asked for either.
    let (_, jobs) = send_planned(&app, "cold/one").await;
    assert_eq!(jobs, 1, "one device, one job");
    let (_, jobs) = send_planned(&app, "cold/many").await;
    assert_eq!(jobs, 3, "25 devices, 10 a job");
    app.stop().await;
}
