//! The book's committed OpenAPI document (`docs/src/api/openapi.json`) is
//! the one the coordinator serves at `/api/v1/openapi.json` with its
//! default settings, so the published reference never lags the API.

use std::path::PathBuf;

use reqwest::Method;
use serde_json::Value;

use crate::common::*;

/// Where the book keeps the document, from this crate's directory.
fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/src/api/openapi.json")
}

#[actix_web::test]
async fn the_committed_openapi_document_is_the_one_served() {
    let app = TestCoordinator::start().await;
    let served: Value = app
        .request(Method::GET, "/api/v1/openapi.json", None)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    app.stop().await;
    let path = committed_path();
    if std::env::var_os("CLARION_BLESS").is_some() {
        let pretty = serde_json::to_string_pretty(&served).unwrap() + "\n";
        std::fs::write(&path, pretty).unwrap();
    }
    let committed: Value = std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    assert!(
        committed == served,
        "{} differs from the document the coordinator serves at /api/v1/openapi.json (first difference at {}); \
         rewrite it with `CLARION_BLESS=1 cargo test -p clarion-coordinator --test api \
         the_committed_openapi_document_is_the_one_served` and commit it",
        path.display(),
        first_difference(&committed, &served, String::new()),
    );
}

/// The JSON pointer of the first place where `a` and `b` differ.
fn first_difference(a: &Value, b: &Value, at: String) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for key in x.keys().chain(y.keys()) {
                let (left, right) = (
                    x.get(key).unwrap_or(&Value::Null),
                    y.get(key).unwrap_or(&Value::Null),
                );
                if left != right {
                    return first_difference(
                        left,
                        right,
                        format!("{at}/{}", key.replace('~', "~0").replace('/', "~1")),
                    );
                }
            }
            at
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .position(|(left, right)| left != right)
            .map_or(at.clone(), |index| {
                first_difference(&x[index], &y[index], format!("{at}/{index}"))
            }),
        _ => {
            if at.is_empty() {
                "the root".to_string()
            } else {
                at
            }
        }
    }
}
