//! Every documented path answers the methods it does not take with 405, an
//! `Allow` header naming exactly the documented ones, and a problem body.

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::common::*;

#[actix_web::test]
async fn undocumented_methods_get_405_with_the_documented_ones_in_allow() {
    let app = TestCoordinator::start().await;
    let doc: Value = app
        .request(Method::GET, "/api/v1/openapi.json", None)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let methods = [
        "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "BREW",
    ];
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let documented: Vec<String> = methods
            .iter()
            .filter(|method| item.get(method.to_lowercase()).is_some())
            .map(|method| method.to_string())
            .collect();
        let concrete = path
            .replace("{token}", &ios_token(1))
            .replace("{topic}", "breaking/uk")
            .replace("{id}", "6f1c2e0e-8b7a-4c1e-9a55-2f0b1f3c4d5e");
        for method in methods.iter().filter(|m| !documented.iter().any(|d| d == *m)) {
            let response = app
                .request(
                    Method::from_bytes(method.as_bytes()).unwrap(),
                    &concrete,
                    Some(ADMIN_KEY),
                )
                .send()
                .await
                .expect("request sent");
            assert_eq!(
                response.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {concrete}"
            );
            let allow = response.headers()["allow"].to_str().unwrap().to_owned();
            let allowed: Vec<&str> = allow.split(", ").collect();
            assert_eq!(allowed, documented, "Allow of {method} {concrete}");
            if *method != "HEAD" {
                let problem =
                    expect_problem(response, StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed").await;
                assert!(problem["detail"].as_str().unwrap().contains(method), "{problem}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 70, "only {checked} combinations checked");
    // An unknown path is still 404, whatever the method.
    let response = app
        .request(
            Method::from_bytes(b"TRACE").unwrap(),
            "/api/v1/nothing",
            Some(ADMIN_KEY),
        )
        .send()
        .await
        .unwrap();
    expect_problem(response, StatusCode::NOT_FOUND, "not-found").await;
    app.stop().await;
}
