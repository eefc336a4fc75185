//! API keys: 401 without a known key, 403 without the scope, open health
//! and OpenAPI endpoints.

use reqwest::{Method, StatusCode};

use crate::common::*;

#[actix_web::test]
async fn a_missing_or_unknown_key_is_401_with_a_bearer_challenge() {
    let app = TestCoordinator::start().await;
    let path = format!("/api/v1/registrations/{}", ios_token(1));
    for key in [None, Some("not-a-key"), Some("")] {
        let response = app.request(Method::GET, &path, key).send().await.unwrap();
        assert_eq!(
            response
                .headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer")
        );
        expect_problem(response, StatusCode::UNAUTHORIZED, "unauthenticated").await;
    }
    let response = app
        .http
        .get(format!("{}{path}", app.base))
        .header("authorization", "Basic YWxhZGRpbjpvcGVuc2VzYW1l")
        .send()
        .await
        .unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED, "unauthenticated").await;
    app.stop().await;
}

#[actix_web::test]
async fn each_endpoint_wants_its_scope() {
    let app = TestCoordinator::start().await;
    let registration_path = format!("/api/v1/registrations/{}", ios_token(2));
    // The newsroom key cannot register devices…
    let response = app
        .request(Method::PUT, &registration_path, Some(SEND_KEY))
        .json(&registration("ios", &["t"]))
        .send()
        .await
        .unwrap();
    let body = expect_problem(response, StatusCode::FORBIDDEN, "forbidden").await;
    assert!(body["detail"].as_str().unwrap().contains("`register`"), "{body}");
    // …and the app key cannot read topic sizes.
    let response = app.get("/api/v1/topics/t", REGISTER_KEY).await;
    expect_problem(response, StatusCode::FORBIDDEN, "forbidden").await;
    // Admin may do both.
    let response = app
        .request(Method::PUT, &registration_path, Some(ADMIN_KEY))
        .json(&registration("ios", &["t"]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        app.get("/api/v1/topics/t", ADMIN_KEY).await.status(),
        StatusCode::OK
    );
    app.stop().await;
}

#[actix_web::test]
async fn health_and_the_openapi_document_are_open() {
    let app = TestCoordinator::start().await;
    for path in ["/healthz", "/api/v1/openapi.json", "/metrics"] {
        let response = app.request(Method::GET, path, None).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    let response = app.request(Method::GET, "/readyz", None).send().await.unwrap();
    assert_ne!(response.status(), StatusCode::UNAUTHORIZED);
    app.stop().await;
}
