//! Liveness, readiness and the OpenAPI document.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::common::*;

#[actix_web::test]
async fn ready_once_the_database_and_the_broker_are_reachable() {
    let app = TestCoordinator::start().await;
    let mut last = Value::Null;
    // The broker link connects (and declares the topology) in the
    // background: wait for it, as long as a cold start on a busy box takes.
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let response = app.request(Method::GET, "/readyz", None).send().await.unwrap();
        let status = response.status();
        last = response.json().await.unwrap();
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(last["status"], "ready", "{last}");
    let checks = last["checks"].as_array().unwrap();
    let names: Vec<&str> = checks.iter().filter_map(|check| check["name"].as_str()).collect();
    assert_eq!(names, vec!["database", "broker"]);
    app.stop().await;
}

#[actix_web::test]
async fn a_coordinator_whose_broker_is_reachable_is_ready_as_soon_as_it_listens() {
    // A probe the moment the port opens (as a test harness or Kubernetes
    // sends one) gets 200, not a 503 that only says the first broker
    // connection is still being made; so the request metrics of a healthy
    // start count no 5xx.
    let app = TestCoordinator::start().await;
    let response = app.request(Method::GET, "/readyz", None).send().await.unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let metrics = app
        .request(Method::GET, "/metrics", None)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let server_errors: Vec<&str> = metrics
        .lines()
        .filter(|line| line.starts_with("clarion_api_requests_total{") && line.contains("status=\"5"))
        .collect();
    assert!(server_errors.is_empty(), "{server_errors:?}");
    app.stop().await;
}

#[actix_web::test]
async fn not_ready_when_the_database_is_gone() {
    let app = TestCoordinator::start().await;
    let admin = app.db.url.replace(&app.db.name, "postgres");
    let (client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", app.db.name))
        .await
        .unwrap();
    let response = app.request(Method::GET, "/readyz", None).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "not_ready");
    assert_eq!(body["checks"][0]["name"], "database");
    assert_ne!(body["checks"][0]["status"], "ok");
    app.stop().await;
}

#[actix_web::test]
async fn the_openapi_document_lists_every_endpoint() {
    let app = TestCoordinator::start().await;
    let doc: Value = app
        .request(Method::GET, "/api/v1/openapi.json", None)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let expected = [
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/metrics", "get"),
        ("/api/v1/openapi.json", "get"),
        ("/api/v1/registrations/{token}", "put"),
        ("/api/v1/registrations/{token}", "get"),
        ("/api/v1/registrations/{token}", "delete"),
        ("/api/v1/registrations/{token}/topics/{topic}", "put"),
        ("/api/v1/registrations/{token}/topics/{topic}", "delete"),
        ("/api/v1/topics/{topic}", "get"),
        ("/api/v1/topics", "get"),
        ("/api/v1/audience", "get"),
        ("/api/v1/notifications", "post"),
        ("/api/v1/notifications", "get"),
        ("/api/v1/notifications/{id}", "get"),
        ("/api/v1/notifications/{id}", "put"),
        ("/api/v1/notifications/{id}/curve", "get"),
        ("/api/v1/notifications/{id}/cancel", "post"),
        ("/api/v1/notifications/{id}/held", "get"),
        ("/api/v1/notifications/{id}/held/release", "post"),
        ("/api/v1/notifications/{id}/held/discard", "post"),
        ("/api/v1/audit", "get"),
        ("/api/v1/receipts", "post"),
        ("/api/v1/live-activities", "post"),
        ("/api/v1/live-activities/{id}", "get"),
        ("/api/v1/live-activities/{id}", "delete"),
        ("/api/v1/live-activities/{id}/updates", "post"),
    ];
    for (path, method) in expected {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} missing from {}",
            doc["paths"]
        );
    }
    let operations: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    assert_eq!(
        operations,
        expected.len(),
        "undocumented or unexpected operations"
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["api_key"]["scheme"],
        "bearer"
    );
    app.stop().await;
}

#[actix_web::test]
async fn the_openapi_document_states_the_limits_in_force() {
    let app = TestCoordinator::start_with(&["--max-topics-per-device=7"]).await;
    let doc: Value = app
        .request(Method::GET, "/api/v1/openapi.json", None)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = doc["paths"]["/api/v1/registrations/{token}"]["get"]["parameters"][0].clone();
    assert_eq!(token["name"], "token");
    assert_eq!(token["schema"]["pattern"], clarion_proto::platform::TOKEN_PATTERN);
    assert!(token["description"].as_str().unwrap().contains("64 hexadecimal"));
    let topic = &doc["paths"]["/api/v1/topics/{topic}"]["get"]["parameters"][0]["schema"];
    assert_eq!(topic["pattern"], clarion_proto::topic::TOPIC_PATTERN);
    assert_eq!(topic["maxLength"], 128);
    let send = &doc["components"]["schemas"]["SendRequest"]["properties"];
    assert_eq!(send["ttl_seconds"]["maximum"], 28 * 24 * 3600);
    assert_eq!(send["topics"]["maxItems"], 20);
    assert_eq!(send["collapse_key"]["maxLength"], 64);
    assert_eq!(send["image_url"]["maxLength"], 1024);
    assert_eq!(send["body"]["pattern"], clarion_proto::payload::BODY_PATTERN);
    assert!(send["data"]["propertyNames"]["not"]["pattern"].is_string());
    let register = &doc["components"]["schemas"]["RegistrationRequest"]["properties"];
    assert_eq!(register["topics"]["maxItems"], 7, "the configured limit");
    assert_eq!(
        register["platform"]["enum"],
        serde_json::json!(["ios", "android", "web"])
    );
    let send_responses = &doc["paths"]["/api/v1/notifications"]["post"]["responses"];
    for status in [
        "200", "202", "400", "401", "403", "409", "413", "415", "422", "503",
    ] {
        assert!(
            send_responses[status].is_object(),
            "POST /api/v1/notifications lists {status}"
        );
    }
    assert_eq!(send["send_at"]["format"], "date-time");
    // A replacement is a send request that must have a `send_at`.
    let replace = &doc["paths"]["/api/v1/notifications/{id}"]["put"];
    let body = &replace["requestBody"]["content"]["application/json"]["schema"];
    assert_eq!(body["allOf"][0]["$ref"], "#/components/schemas/SendRequest");
    assert_eq!(body["allOf"][1]["required"], serde_json::json!(["send_at"]));
    for status in [
        "200", "400", "401", "403", "404", "409", "413", "415", "422", "503",
    ] {
        assert!(
            replace["responses"][status].is_object(),
            "PUT /api/v1/notifications/{{id}} lists {status}"
        );
    }
    app.stop().await;
}
