//! Register, re-register, read back, follow / unfollow, delete.

use futures::{StreamExt, stream};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::*;

#[actix_web::test]
async fn a_registration_is_stored_and_read_back() {
    let app = TestCoordinator::start().await;
    let token = ios_token(1);
    let response = app
        .put_registration(&token, registration("ios", &["breaking/uk", "sport"]))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let stored: Value = response.json().await.unwrap();
    assert_eq!(stored["token"], token);
    assert_eq!(stored["platform"], "ios");
    assert_eq!(stored["environment"], "production");
    assert_eq!(stored["topics"], json!(["breaking/uk", "sport"]));

    let read: Value = app
        .get(&format!("/api/v1/registrations/{token}"), REGISTER_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(read, stored);
    app.stop().await;
}

#[actix_web::test]
async fn re_registering_replaces_the_topic_set() {
    let app = TestCoordinator::start().await;
    let token = android_token(7);
    app.put_registration(&token, registration("android", &["a", "b"]))
        .await;
    let response = app
        .put_registration(&token, registration("android", &["b", "c/d"]))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let read: Value = app
        .get(&format!("/api/v1/registrations/{token}"), REGISTER_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(read["topics"], json!(["b", "c/d"]));
    assert!(
        read.get("environment").is_none(),
        "android has no APNs environment: {read}"
    );
    let old: Value = app.get("/api/v1/topics/a", SEND_KEY).await.json().await.unwrap();
    assert_eq!(old["subscribers"], 0);
    app.stop().await;
}

#[actix_web::test]
async fn tokens_are_canonicalised_and_sandbox_is_kept() {
    let app = TestCoordinator::start().await;
    let token = ios_token(3).to_uppercase();
    let body = json!({"platform": "ios", "topics": ["dev"], "environment": "sandbox"});
    let stored: Value = app.put_registration(&token, body).await.json().await.unwrap();
    assert_eq!(stored["token"], token.to_lowercase());
    assert_eq!(stored["environment"], "sandbox");
    // Either spelling finds it.
    let read = app
        .get(&format!("/api/v1/registrations/{token}"), REGISTER_KEY)
        .await;
    assert_eq!(read.status(), StatusCode::OK);
    app.stop().await;
}

#[actix_web::test]
async fn deleting_forgets_the_device() {
    let app = TestCoordinator::start().await;
    let token = ios_token(9);
    app.put_registration(&token, registration("ios", &["breaking/uk"]))
        .await;
    let path = format!("/api/v1/registrations/{token}");
    for _ in 0..2 {
        let response = app
            .request(Method::DELETE, &path, Some(REGISTER_KEY))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
    }
    let response = app.get(&path, REGISTER_KEY).await;
    expect_problem(response, StatusCode::NOT_FOUND, "not-found").await;
    app.stop().await;
}

#[actix_web::test]
async fn one_topic_is_followed_and_unfollowed_without_resending_the_set() {
    let app = TestCoordinator::start().await;
    let token = android_token(11);
    app.put_registration(&token, registration("android", &["breaking/uk"]))
        .await;
    let topic_path = format!("/api/v1/registrations/{token}/topics/sport/football/premier-league");

    let added = app
        .request(Method::PUT, &topic_path, Some(REGISTER_KEY))
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), StatusCode::OK);
    let added: Value = added.json().await.unwrap();
    assert_eq!(
        added["topics"],
        json!(["breaking/uk", "sport/football/premier-league"])
    );
    // Following twice changes nothing.
    let again: Value = app
        .request(Method::PUT, &topic_path, Some(REGISTER_KEY))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["topics"], added["topics"]);

    let removed = app
        .request(Method::DELETE, &topic_path, Some(REGISTER_KEY))
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), StatusCode::NO_CONTENT);
    let read: Value = app
        .get(&format!("/api/v1/registrations/{token}"), REGISTER_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(read["topics"], json!(["breaking/uk"]));
    app.stop().await;
}

#[actix_web::test]
async fn following_a_topic_needs_a_registered_device() {
    let app = TestCoordinator::start().await;
    let path = format!("/api/v1/registrations/{}/topics/breaking", ios_token(404));
    let response = app
        .request(Method::PUT, &path, Some(REGISTER_KEY))
        .send()
        .await
        .unwrap();
    let body = expect_problem(response, StatusCode::NOT_FOUND, "not-found").await;
    assert!(
        body["detail"].as_str().unwrap().contains("register it first"),
        "{body}"
    );
    app.stop().await;
}

#[actix_web::test]
async fn the_topic_cap_holds_for_single_follows_too() {
    let app = TestCoordinator::start_with(&["--max-topics-per-device=2"]).await;
    let token = ios_token(12);
    app.put_registration(&token, registration("ios", &["a", "b"]))
        .await;
    let path = format!("/api/v1/registrations/{token}/topics/c");
    let response = app
        .request(Method::PUT, &path, Some(REGISTER_KEY))
        .send()
        .await
        .unwrap();
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
    // An already followed topic is still fine at the cap.
    let path = format!("/api/v1/registrations/{token}/topics/b");
    let response = app
        .request(Method::PUT, &path, Some(REGISTER_KEY))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    app.stop().await;
}

#[actix_web::test]
async fn ten_thousand_registrations_written_through_the_api_are_all_readable() {
    const DEVICES: u64 = 10_000;
    const CONCURRENCY: usize = 32;
    let app = TestCoordinator::start_with(&["--http-workers=2", "--database-pool-size=16"]).await;
    let token = |n: u64| {
        if n.is_multiple_of(2) {
            ios_token(n)
        } else {
            android_token(n)
        }
    };
    let platform = |n: u64| if n.is_multiple_of(2) { "ios" } else { "android" };

    let written = stream::iter(0..DEVICES)
        .map(|n| {
            let app = &app;
            async move {
                let topics = if n.is_multiple_of(3) {
                    vec!["bulk", "bulk/extra"]
                } else {
                    vec!["bulk"]
                };
                app.put_registration(&token(n), registration(platform(n), &topics))
                    .await
                    .status()
            }
        })
        .buffer_unordered(CONCURRENCY)
        .filter(|status| std::future::ready(*status == StatusCode::OK))
        .count()
        .await;
    assert_eq!(written as u64, DEVICES);

    let readable = stream::iter(0..DEVICES)
        .map(|n| {
            let app = &app;
            async move {
                let response = app
                    .get(&format!("/api/v1/registrations/{}", token(n)), REGISTER_KEY)
                    .await;
                let body: Value = response.json().await.unwrap_or_default();
                let expected = if n.is_multiple_of(3) { 2 } else { 1 };
                body["platform"] == platform(n) && body["topics"].as_array().map(Vec::len) == Some(expected)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await;
    assert_eq!(readable as u64, DEVICES);

    let bulk: Value = app
        .get("/api/v1/topics/bulk", SEND_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(bulk["subscribers"], DEVICES);
    assert_eq!(bulk["ios"], DEVICES / 2);
    assert_eq!(bulk["android"], DEVICES / 2);
    let extra: Value = app
        .get("/api/v1/topics/bulk/extra", SEND_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(extra["subscribers"], DEVICES.div_ceil(3));
    app.stop().await;
}

#[actix_web::test]
async fn a_registration_keeps_its_locale_in_lower_case_and_refuses_a_malformed_one() {
    let app = TestCoordinator::start().await;
    let token = "ab".repeat(32);
    let path = format!("/api/v1/registrations/{token}");
    let response = app
        .request(reqwest::Method::PUT, &path, Some(REGISTER_KEY))
        .json(&json!({"platform": "ios", "topics": ["t"], "locale": "fr-CA"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let stored: serde_json::Value = response.json().await.unwrap();
    assert_eq!(stored["locale"], "fr-ca");
    for bad in ["fr_CA", "français", "f"] {
        let response = app
            .request(reqwest::Method::PUT, &path, Some(REGISTER_KEY))
            .json(&json!({"platform": "ios", "topics": ["t"], "locale": bad}))
            .send()
            .await
            .unwrap();
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
        assert!(
            problem["detail"].as_str().unwrap_or_default().contains("locale"),
            "{problem}"
        );
    }
    // Registering again without a locale forgets it.
    let response = app
        .request(reqwest::Method::PUT, &path, Some(REGISTER_KEY))
        .json(&json!({"platform": "ios", "topics": ["t", "u"]}))
        .send()
        .await
        .unwrap();
    let stored: serde_json::Value = response.json().await.unwrap();
    assert!(stored.get("locale").is_none(), "{stored}");
    app.stop().await;
}
