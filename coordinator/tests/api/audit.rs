//! The audit log: sends, cancels and admin requests recorded with the
//! key's fingerprint, read newest first, page by page.

use reqwest::{Method, StatusCode};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::common::*;

fn fingerprint(key: &str) -> String {
    hex::encode(&Sha256::digest(key.as_bytes())[..6])
}

async fn audit_page(app: &TestCoordinator, query: &str) -> Value {
    let response = app.get(&format!("/api/v1/audit{query}"), ADMIN_KEY).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

#[actix_web::test]
async fn sends_cancels_and_admin_requests_are_audited() {
    let app = TestCoordinator::start().await;
    let sent: Value = app.send(SEND_KEY, &["breaking"]).await.json().await.unwrap();
    let id = sent["id"].as_str().expect("an id").to_owned();
    let cancelled = app
        .request(
            Method::POST,
            &format!("/api/v1/notifications/{id}/cancel"),
            Some(SEND_KEY),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), StatusCode::OK);
    // The newsroom's reads are not audited; an admin's are.
    assert_eq!(
        app.get(&format!("/api/v1/notifications/{id}"), SEND_KEY)
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        app.get(&format!("/api/v1/notifications/{id}"), ADMIN_KEY)
            .await
            .status(),
        StatusCode::OK
    );

    let page = audit_page(&app, "").await;
    let records = page["records"].as_array().expect("records");
    let summary: Vec<(&str, &str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap(),
                r["target"].as_str().unwrap(),
                r["key_id"].as_str().unwrap(),
            )
        })
        .collect();
    let desk = fingerprint(SEND_KEY);
    let ops = fingerprint(ADMIN_KEY);
    let read = format!("GET /api/v1/notifications/{id}");
    assert_eq!(
        summary,
        vec![
            ("admin.request", read.as_str(), ops.as_str()),
            ("cancel", id.as_str(), desk.as_str()),
            ("send", id.as_str(), desk.as_str()),
        ],
        "newest first"
    );
    assert_eq!(records[0]["detail"], "200");
    assert_eq!(records[2]["detail"], "accepted");
    assert!(records[0]["at"].as_str().is_some());
    assert!(page["next_cursor"].is_null());

    // The audit read itself was recorded once it was answered.
    let filtered = audit_page(&app, "?action=admin.request").await;
    let targets: Vec<&str> = filtered["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["target"].as_str().unwrap())
        .collect();
    assert_eq!(targets, vec!["GET /api/v1/audit", read.as_str()]);

    // Only admins read it; bad parameters are 422.
    assert_eq!(
        app.get("/api/v1/audit", SEND_KEY).await.status(),
        StatusCode::FORBIDDEN
    );
    for query in [
        "?limit=0",
        "?limit=1001",
        "?cursor=abc",
        "?cursor=-1",
        "?action=delete",
        "?colour=red",
    ] {
        let response = app.get(&format!("/api/v1/audit{query}"), ADMIN_KEY).await;
        expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
    }
    app.stop().await;
}

#[actix_web::test]
async fn the_audit_log_is_read_page_by_page() {
    let app = TestCoordinator::start().await;
    let mut ids = Vec::new();
    for _ in 0..7 {
        let sent: Value = app.send(SEND_KEY, &["breaking"]).await.json().await.unwrap();
        ids.push(sent["id"].as_str().unwrap().to_owned());
    }
    // A replayed id is a send too.
    let replay = app
        .request(Method::POST, "/api/v1/notifications", Some(SEND_KEY))
        .json(&serde_json::json!({"id": ids[0], "topics": ["breaking"], "body": "Something happened"}))
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), StatusCode::OK);

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10 {
        let query = match &cursor {
            Some(cursor) => format!("?action=send&limit=3&cursor={cursor}"),
            None => "?action=send&limit=3".to_owned(),
        };
        let page = audit_page(&app, &query).await;
        let records = page["records"].as_array().unwrap();
        assert!(records.len() <= 3);
        seen.extend(records.iter().map(|r| {
            (
                r["target"].as_str().unwrap().to_owned(),
                r["detail"].as_str().unwrap().to_owned(),
            )
        }));
        cursor = page["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    assert!(cursor.is_none(), "paging ended");
    let mut expected: Vec<(String, String)> = ids
        .iter()
        .rev()
        .map(|id| (id.clone(), "accepted".to_owned()))
        .collect();
    expected.insert(0, (ids[0].clone(), "replayed".to_owned()));
    assert_eq!(seen, expected, "every send once, newest first");
    app.stop().await;
}
