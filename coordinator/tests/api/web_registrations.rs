//! Web push registrations: a browser's subscription stored and read back
//! as sent, each refusal a 422 naming its field, the allow-list of push
//! services, and the subscription gone with the registration.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::*;

/// RFC 8291's example receiver key and secret (§5): a real P-256 point.
const P256DH: &str =
    "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";
const ID: &str = "site-chosen_subscription-id-01";

fn subscription(endpoint: &str, p256dh: &str, auth: &str) -> Value {
    json!({"endpoint": endpoint, "expirationTime": null, "keys": {"p256dh": p256dh, "auth": auth}})
}

fn web(subscription: Value) -> Value {
    json!({"platform": "web", "subscription": subscription, "topics": ["breaking/uk"]})
}

#[actix_web::test]
async fn a_web_subscription_is_stored_and_read_back_as_sent() {
    let app = TestCoordinator::start().await;
    let sent = subscription("https://fcm.googleapis.com/fcm/send/abc:APA91b", P256DH, AUTH);
    let response = app.put_registration(ID, web(sent)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let stored: Value = response.json().await.unwrap();
    assert_eq!(stored["platform"], "web");
    assert_eq!(stored["token"], ID);
    let expected = json!({"endpoint": "https://fcm.googleapis.com/fcm/send/abc:APA91b",
                          "keys": {"p256dh": P256DH, "auth": AUTH}});
    assert_eq!(stored["subscription"], expected);
    assert!(stored.get("environment").is_none(), "{stored}");
    let read: Value = app
        .get(&format!("/api/v1/registrations/{ID}"), REGISTER_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(read, stored);

    // Deleting the registration deletes the subscription with it.
    let response = app
        .request(
            Method::DELETE,
            &format!("/api/v1/registrations/{ID}"),
            Some(REGISTER_KEY),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let left: i64 = app
        .sql()
        .await
        .query_one("SELECT count(*) FROM web_subscriptions", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
    app.stop().await;
}

#[actix_web::test]
async fn each_refused_subscription_is_a_422_naming_its_field() {
    let app = TestCoordinator::start().await;
    let mut off_curve = clarion_proto::web_push::base64url_decode(P256DH).unwrap();
    off_curve[64] ^= 1;
    let off_curve = clarion_proto::web_push::base64url(&off_curve);
    let fcm = "https://fcm.googleapis.com/fcm/send/x";
    let cases = [
        (
            ID,
            web(subscription("http://fcm.googleapis.com/x", P256DH, AUTH)),
            "subscription.endpoint",
        ),
        (
            ID,
            web(subscription("https://push.evil.example/x", P256DH, AUTH)),
            "subscription.endpoint",
        ),
        (
            ID,
            web(subscription(fcm, &P256DH[..30], AUTH)),
            "subscription.keys.p256dh",
        ),
        (
            ID,
            web(subscription(fcm, &off_curve, AUTH)),
            "subscription.keys.p256dh",
        ),
        (
            ID,
            web(subscription(fcm, P256DH, "AAAAAAAA")),
            "subscription.keys.auth",
        ),
        (ID, json!({"platform": "web", "topics": ["t"]}), "subscription"),
        (
            &ios_token(1),
            json!({"platform": "ios", "topics": ["t"], "subscription": subscription(fcm, P256DH, AUTH)}),
            "subscription",
        ),
        (
            "short",
            web(subscription(fcm, P256DH, AUTH)),
            "web subscription's id",
        ),
        (
            "has.a.dot.in-the-id",
            web(subscription(fcm, P256DH, AUTH)),
            "web subscription's id",
        ),
    ];
    for (token, body, field) in cases {
        let response = app.put_registration(token, body.clone()).await;
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(field), "{body}: {detail}");
    }
    app.stop().await;
}

#[actix_web::test]
async fn the_allow_list_replaces_the_default_push_services() {
    let app = TestCoordinator::start_with(&["--webpush-allowed-hosts=*.push.example.net,localhost"]).await;
    for (endpoint, status) in [
        ("https://a.push.example.net/sub/1", StatusCode::OK),
        ("https://localhost:8443/sub/1", StatusCode::OK),
        (
            "https://fcm.googleapis.com/fcm/send/x",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        ("https://push.example.net/sub/1", StatusCode::UNPROCESSABLE_ENTITY),
    ] {
        let response = app
            .put_registration(ID, web(subscription(endpoint, P256DH, AUTH)))
            .await;
        assert_eq!(response.status(), status, "{endpoint}");
    }
    app.stop().await;
}
