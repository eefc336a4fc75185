//! Push-to-start registrations (issue 38): a `kind` stored and read back,
//! `device` by default, and each refusal a 422 naming its field.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::*;

fn push_to_start(attributes_type: &str) -> Value {
    json!({"platform": "ios", "kind": "push_to_start", "attributes_type": attributes_type,
           "topics": ["sport/football"]})
}

#[actix_web::test]
async fn a_push_to_start_registration_is_stored_and_read_back_with_its_kind() {
    let app = TestCoordinator::start().await;
    let token = ios_token(7);
    let response = app
        .put_registration(&token, push_to_start("MatchAttributes"))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let stored: Value = response.json().await.unwrap();
    assert_eq!(stored["kind"], "push_to_start", "{stored}");
    assert_eq!(stored["attributes_type"], "MatchAttributes", "{stored}");
    let read: Value = app
        .get(&format!("/api/v1/registrations/{token}"), REGISTER_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(read, stored);

    // A topic added keeps the kind and the attributes type.
    let added: Value = app
        .request(
            reqwest::Method::PUT,
            &format!("/api/v1/registrations/{token}/topics/sport/tennis"),
            Some(REGISTER_KEY),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(added["kind"], "push_to_start", "{added}");
    assert_eq!(added["attributes_type"], "MatchAttributes", "{added}");
    assert_eq!(added["topics"], json!(["sport/football", "sport/tennis"]));

    // Registered again without a kind, the token is a device token again.
    let device: Value = app
        .put_registration(&token, registration("ios", &["sport/football"]))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(device["kind"], "device", "{device}");
    assert!(device.get("attributes_type").is_none(), "{device}");
    let kinds: Vec<String> = app
        .sql()
        .await
        .query("SELECT DISTINCT kind FROM registrations", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(kinds, ["device"]);
    app.stop().await;
}

#[actix_web::test]
async fn each_refused_kind_is_a_422_naming_its_field() {
    let app = TestCoordinator::start().await;
    let cases = [
        (
            ios_token(1),
            json!({"platform": "ios", "kind": "live", "topics": ["a"]}),
            "kind",
        ),
        (
            android_token(1),
            json!({"platform": "android", "kind": "push_to_start", "attributes_type": "A", "topics": ["a"]}),
            "platform",
        ),
        (
            ios_token(2),
            json!({"platform": "ios", "kind": "push_to_start", "topics": ["a"]}),
            "attributes_type",
        ),
        (
            ios_token(3),
            json!({"platform": "ios", "attributes_type": "MatchAttributes", "topics": ["a"]}),
            "attributes_type",
        ),
        (ios_token(4), push_to_start("Match-Attributes"), "attributes_type"),
        (ios_token(5), push_to_start(&"A".repeat(129)), "attributes_type"),
    ];
    for (token, body, field) in cases {
        let response = app.put_registration(&token, body.clone()).await;
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(field), "{body}: {detail}");
    }
    let rows: i64 = app
        .sql()
        .await
        .query_one("SELECT count(*) FROM registrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "nothing refused was stored");
    app.stop().await;
}
