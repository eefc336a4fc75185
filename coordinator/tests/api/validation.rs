//! Every kind of bad input gets its 4xx and a problem body that says what is wrong.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::*;

#[actix_web::test]
async fn bad_registrations_are_refused_with_a_reason() {
    let app = TestCoordinator::start().await;
    let ios = ios_token(1);
    let android = android_token(1);
    let cases: Vec<(&str, String, Value, &str)> = vec![
        (
            "unknown platform",
            ios.clone(),
            json!({"platform": "windows", "topics": ["a"]}),
            "windows",
        ),
        (
            "short ios token",
            "abc123".into(),
            registration("ios", &["a"]),
            "64 hexadecimal",
        ),
        (
            "non-hex ios token",
            "z".repeat(64),
            registration("ios", &["a"]),
            "hexadecimal",
        ),
        (
            "ios token as android",
            ios.clone(),
            registration("android", &["a"]),
            "Android",
        ),
        (
            "android token as ios",
            android.clone(),
            registration("ios", &["a"]),
            "iOS",
        ),
        (
            "no topics",
            ios.clone(),
            registration("ios", &[]),
            "at least one topic",
        ),
        ("empty topic", ios.clone(), registration("ios", &[""]), "empty"),
        (
            "doubled slash",
            ios.clone(),
            registration("ios", &["breaking//uk"]),
            "empty segment",
        ),
        (
            "space in topic",
            ios.clone(),
            registration("ios", &["breaking news"]),
            "' '",
        ),
        (
            "sandbox on android",
            android.clone(),
            json!({"platform": "android", "topics": ["a"], "environment": "sandbox"}),
            "iOS tokens only",
        ),
        (
            "unknown environment",
            ios.clone(),
            json!({"platform": "ios", "topics": ["a"], "environment": "staging"}),
            "staging",
        ),
    ];
    for (case, token, body, hint) in cases {
        let response = app.put_registration(&token, body).await;
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains(hint),
            "{case}: {detail:?} should mention {hint:?}"
        );
    }
    app.stop().await;
}

#[actix_web::test]
async fn too_many_topics_are_refused() {
    let app = TestCoordinator::start().await;
    let topics: Vec<String> = (0..101).map(|i| format!("topic/{i}")).collect();
    let response = app
        .put_registration(&ios_token(1), json!({"platform": "ios", "topics": topics}))
        .await;
    let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
    assert!(
        problem["detail"].as_str().unwrap().contains("at most 100"),
        "{problem}"
    );
    // The limit is on the request as sent (the OpenAPI `maxItems`), so 150
    // copies of one topic are too many; within it, duplicates are folded.
    let topics: Vec<&str> = std::iter::repeat_n("same", 150).collect();
    let response = app
        .put_registration(&ios_token(1), json!({"platform": "ios", "topics": topics}))
        .await;
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
    let topics: Vec<&str> = std::iter::repeat_n("same", 100).collect();
    let response = app
        .put_registration(&ios_token(1), json!({"platform": "ios", "topics": topics}))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let stored: Value = response.json().await.unwrap();
    assert_eq!(stored["topics"], json!(["same"]));
    app.stop().await;
}

#[actix_web::test]
async fn malformed_bodies_are_400_oversized_413_and_non_json_415() {
    let app = TestCoordinator::start().await;
    let url = format!("{}/api/v1/registrations/{}", app.base, ios_token(1));
    let send = |body: String, content_type: &'static str| {
        app.http
            .put(&url)
            .bearer_auth(REGISTER_KEY)
            .header("content-type", content_type)
            .body(body)
            .send()
    };

    for (case, body) in [
        ("not JSON", "{\"platform\": ".to_owned()),
        (
            "wrong type",
            json!({"platform": "ios", "topics": "a"}).to_string(),
        ),
        ("missing field", json!({"platform": "ios"}).to_string()),
        (
            "unknown field",
            json!({"platform": "ios", "topics": ["a"], "topic": "b"}).to_string(),
        ),
    ] {
        let response = send(body, "application/json").await.unwrap();
        let problem = expect_problem(response, StatusCode::BAD_REQUEST, "malformed-request").await;
        assert!(
            problem["detail"].as_str().unwrap().contains("JSON"),
            "{case}: {problem}"
        );
    }

    let huge = json!({"platform": "ios", "topics": ["a"], "pad": "x".repeat(64 * 1024)}).to_string();
    let response = send(huge, "application/json").await.unwrap();
    expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large").await;

    let response = send("platform=ios".into(), "application/x-www-form-urlencoded")
        .await
        .unwrap();
    expect_problem(
        response,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported-media-type",
    )
    .await;
    app.stop().await;
}

#[actix_web::test]
async fn implausible_tokens_in_lookups_and_unknown_paths_are_explained() {
    let app = TestCoordinator::start().await;
    let response = app.get("/api/v1/registrations/not-a-token", REGISTER_KEY).await;
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
    let response = app.get("/api/v1/nothing-here", ADMIN_KEY).await;
    expect_problem(response, StatusCode::NOT_FOUND, "not-found").await;
    app.stop().await;
}

#[actix_web::test]
async fn control_characters_in_a_notification_are_refused_not_a_server_error() {
    let app = TestCoordinator::start().await;
    for (field, body) in [
        ("body", json!({"topics": ["t"], "body": "breaking\u{0}news"})),
        (
            "title",
            json!({"topics": ["t"], "title": "\u{1b}[31m", "body": "x"}),
        ),
        (
            "a data value",
            json!({"topics": ["t"], "body": "x", "data": {"k": "a\u{0}"}}),
        ),
    ] {
        let response = post_notification(&app, &body).await;
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
        assert!(
            problem["detail"].as_str().unwrap_or_default().contains(field),
            "{field}: {problem}"
        );
    }
    // Newlines and tabs are text.
    let response = post_notification(&app, &json!({"topics": ["t"], "body": "line one\n\tline two"})).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    app.stop().await;
}

#[actix_web::test]
async fn each_message_field_is_validated_with_a_reason_that_names_it() {
    let app = TestCoordinator::start().await;
    let background = |extra: serde_json::Value| {
        let mut body = json!({"topics": ["t"], "push_type": "background"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    for (field, body) in [
        ("title", background(json!({"title": "shown"}))),
        ("body", background(json!({"body": "shown"}))),
        ("badge", background(json!({"badge": 1}))),
        ("sound", background(json!({"sound": "chime"}))),
        ("normal priority", background(json!({"priority": "high"}))),
        (
            "badge",
            json!({"topics": ["t"], "body": "x", "badge": 2_147_483_648u64}),
        ),
        ("badge", json!({"topics": ["t"], "body": "x", "badge": -1})),
        (
            "relevance_score",
            json!({"topics": ["t"], "body": "x", "relevance_score": 1.5}),
        ),
        (
            "category",
            json!({"topics": ["t"], "body": "x", "category": "  "}),
        ),
        (
            "android_channel_id",
            json!({"topics": ["t"], "body": "x", "android_channel_id": "é"}),
        ),
        (
            "sound",
            json!({"topics": ["t"], "body": "x", "sound": "s".repeat(256)}),
        ),
        (
            "interruption_level",
            json!({"topics": ["t"], "body": "x", "interruption_level": "critical"}),
        ),
        (
            "push_type",
            json!({"topics": ["t"], "body": "x", "push_type": "voip"}),
        ),
        ("body", json!({"topics": ["t"]})),
        (
            "localizations",
            background(json!({"localizations": {"fr": {"body": "x"}}})),
        ),
        (
            "localizations",
            json!({"topics": ["t"], "body": "x", "localizations": {"fr_CA": {"body": "x"}}}),
        ),
        (
            "localizations",
            json!({"topics": ["t"], "body": "x", "localizations": {"fr": {"body": "x"}, "FR": {"body": "y"}}}),
        ),
        (
            "localization \"de\"",
            json!({"topics": ["t"], "body": "x", "localizations": {"de": {"body": " "}}}),
        ),
    ] {
        let response = post_notification(&app, &body).await;
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
        assert!(
            problem["detail"].as_str().unwrap_or_default().contains(field),
            "{field}: {body} → {problem}"
        );
    }
    let sent = json!({"topics": ["t"], "body": "x", "badge": 0, "sound": null, "category": "NEWS",
                      "interruption_level": "passive", "relevance_score": 0.25, "android_channel_id": "news"});
    let response = post_notification(&app, &sent).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let accepted: serde_json::Value = response.json().await.unwrap();
    let id = accepted["id"].as_str().unwrap();
    let status: serde_json::Value = app
        .get(&format!("/api/v1/notifications/{id}"), SEND_KEY)
        .await
        .json()
        .await
        .unwrap();
    let message = &status["message"];
    assert_eq!(message["push_type"], "alert");
    assert_eq!(message["badge"], 0);
    assert!(
        message["sound"].is_null() && message.get("sound").is_some(),
        "silent: {message}"
    );
    assert_eq!(message["interruption_level"], "passive");
    assert_eq!(message["relevance_score"], 0.25);
    assert_eq!(message["android_channel_id"], "news");
    let background = background(json!({"data": {"refresh": "1"}}));
    let response = post_notification(&app, &background).await;
    assert_eq!(
        response.status(),
        StatusCode::ACCEPTED,
        "a background push needs no body"
    );
    app.stop().await;
}

/// POSTs `body` as a notification with the send key.
async fn post_notification(app: &TestCoordinator, body: &serde_json::Value) -> reqwest::Response {
    app.request(reqwest::Method::POST, "/api/v1/notifications", Some(SEND_KEY))
        .json(body)
        .send()
        .await
        .unwrap()
}
