//! Coordinator roles (`--role`): every documented route is served by the
//! role it belongs to and answered 421 `wrong-role`, naming that role, by a
//! coordinator of the other; an api-only coordinator needs no broker.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::*;

/// A broker URL nothing listens on.
const NO_BROKER: &str = "--amqp-url=amqp://guest:guest@127.0.0.1:1/%2f";

/// The role that serves `method path` when only one runs, as the book's
/// Kubernetes page lists it: `None` for the routes both serve.
fn served_by(method: &str, path: &str) -> Option<&'static str> {
    let open = ["/healthz", "/readyz", "/metrics", "/api/v1/openapi.json"];
    let read = method == "GET" && path.starts_with("/api/v1/notifications");
    if open.contains(&path) || read {
        None
    } else if path.starts_with("/api/v1/registrations/") || path == "/api/v1/receipts" {
        Some("api")
    } else {
        Some("control")
    }
}

/// Asks every documented route of `app` (admin key, empty body) and checks
/// that those `other` serves, and only those, are answered 421 naming it.
async fn check_routes(app: &TestCoordinator, other: &str) -> usize {
    let doc: Value = app
        .get("/api/v1/openapi.json", ADMIN_KEY)
        .await
        .json()
        .await
        .unwrap();
    let mut refused = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let concrete = path
            .replace("{token}", &ios_token(7))
            .replace("{topic}", "breaking/uk")
            .replace("{id}", "6f1c2e0e-8b7a-4c1e-9a55-2f0b1f3c4d5e");
        for method in ["GET", "POST", "PUT", "DELETE"] {
            if item.get(method.to_lowercase()).is_none() {
                continue;
            }
            let response = app
                .request(
                    Method::from_bytes(method.as_bytes()).unwrap(),
                    &concrete,
                    Some(ADMIN_KEY),
                )
                .send()
                .await
                .expect("request sent");
            if served_by(method, path) == Some(other) {
                assert_eq!(
                    response.status(),
                    StatusCode::MISDIRECTED_REQUEST,
                    "{method} {path} is not served here"
                );
                let problem = expect_problem(response, StatusCode::MISDIRECTED_REQUEST, "wrong-role").await;
                let detail = problem["detail"].as_str().unwrap();
                assert!(
                    detail.contains(&format!("role `{other}`")),
                    "{method} {path}: {detail}"
                );
                assert!(detail.contains(&concrete), "{method} {path}: {detail}");
                refused += 1;
            } else {
                assert_ne!(
                    response.status(),
                    StatusCode::MISDIRECTED_REQUEST,
                    "{method} {path} is served here"
                );
            }
        }
    }
    refused
}

#[actix_web::test]
async fn an_api_coordinator_serves_the_app_facing_routes_without_a_broker_and_refuses_the_rest() {
    let app = TestCoordinator::start_with(&["--role=api", NO_BROKER]).await;
    // Ready with PostgreSQL alone: the broker is no check of its.
    let response = app.request(Method::GET, "/readyz", None).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let ready: Value = response.json().await.unwrap();
    let checks: Vec<&str> = ready["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|check| check["name"].as_str())
        .collect();
    assert_eq!(checks, vec!["database"], "{ready}");

    let refused = check_routes(&app, "control").await;
    // Topics (2), audience, send, replace, cancel, held release and
    // discard, audit, Live Activities (create, update, get, delete): a new
    // route changes this count; decide its role (`api::routes`) and the
    // chart's routing with it.
    assert_eq!(refused, 13, "control routes refused");
    for path in ["/console", "/console/", "/console/session"] {
        let response = app.get(path, ADMIN_KEY).await;
        assert_eq!(response.status(), StatusCode::MISDIRECTED_REQUEST, "{path}");
        let problem = expect_problem(response, StatusCode::MISDIRECTED_REQUEST, "wrong-role").await;
        assert!(
            problem["detail"].as_str().unwrap().contains("role `control`"),
            "{problem}"
        );
    }
    // The app-facing routes work.
    let token = ios_token(1);
    let response = app
        .put_registration(&token, json!({"platform": "ios", "topics": ["breaking/uk"]}))
        .await;
    assert!(response.status().is_success(), "{}", response.status());
    let registration: Value = app
        .get(&format!("/api/v1/registrations/{token}"), REGISTER_KEY)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(registration["topics"], json!(["breaking/uk"]), "{registration}");
    for path in ["/healthz", "/metrics"] {
        let response = app.request(Method::GET, path, None).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    app.stop().await;
}

#[actix_web::test]
async fn a_control_coordinator_serves_sends_and_reads_and_refuses_the_app_facing_writes() {
    let app = TestCoordinator::start_with(&["--role=control"]).await;
    let refused = check_routes(&app, "api").await;
    // Five registration routes and the receipts.
    assert_eq!(refused, 6, "app-facing routes refused");
    let response = app.send(SEND_KEY, &["breaking/uk"]).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let accepted: Value = response.json().await.unwrap();
    let id = accepted["id"].as_str().unwrap();
    let status = app.get(&format!("/api/v1/notifications/{id}"), SEND_KEY).await;
    assert_eq!(status.status(), StatusCode::OK);
    let console = app.get("/console/", ADMIN_KEY).await;
    assert_eq!(console.status(), StatusCode::OK);
    app.stop().await;
}
