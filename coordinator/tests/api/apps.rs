//! The apps an installation serves, as the API answers them (issue 32): an
//! app it does not serve is a 404 on a read or a delete and a 422 naming
//! it on a write, and the OpenAPI document gives `app` as the apps served
//! now, following the apps file as it changes.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::*;
use crate::posture::KeysFile;

const PUZZLES: &str = "[apps.puzzles]\nfcm_credentials_file = \"/nowhere/sa.json\"\n";
const PUZZLES_AND_SPORT: &str = "[apps.puzzles]\nfcm_credentials_file = \"/nowhere/sa.json\"\n[apps.sport]\nfcm_credentials_file = \"/nowhere/sa.json\"\n";

async fn start_serving(apps: &KeysFile) -> TestCoordinator {
    TestCoordinator::start_with(&[&format!("--apps-file={}", apps.path.display())]).await
}

#[actix_web::test]
async fn an_unknown_app_is_a_404_on_reads_and_deletes_and_a_422_naming_it_on_writes() {
    let apps = KeysFile::new(PUZZLES_AND_SPORT);
    let app = start_serving(&apps).await;
    let token = ios_token(7);
    let reads = [
        (
            Method::GET,
            format!("/api/v1/registrations/{token}"),
            REGISTER_KEY,
        ),
        (
            Method::DELETE,
            format!("/api/v1/registrations/{token}"),
            REGISTER_KEY,
        ),
        (
            Method::DELETE,
            format!("/api/v1/registrations/{token}/topics/daily"),
            REGISTER_KEY,
        ),
        (Method::GET, "/api/v1/topics/daily".to_owned(), SEND_KEY),
        (Method::GET, "/api/v1/topics".to_owned(), SEND_KEY),
        (Method::GET, "/api/v1/audience?topics=daily".to_owned(), SEND_KEY),
    ];
    for (method, path, key) in reads {
        let separator = if path.contains('?') { '&' } else { '?' };
        let served = app
            .request(method.clone(), &format!("{path}{separator}app=sport"), Some(key))
            .send()
            .await
            .expect("sent");
        assert_ne!(
            served.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{method} {path} in a served app"
        );
        let unknown = app
            .request(
                method.clone(),
                &format!("{path}{separator}app=crosswords"),
                Some(key),
            )
            .send()
            .await
            .expect("sent");
        let problem = expect_problem(unknown, StatusCode::NOT_FOUND, "not-found").await;
        assert_names_the_app(&problem, &format!("{method} {path}"));
    }
    let scheduled_for = (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339();
    let writes = [
        (
            Method::PUT,
            format!("/api/v1/registrations/{token}"),
            REGISTER_KEY,
            json!({"app": "crosswords", "platform": "ios", "topics": ["daily"]}),
        ),
        (
            Method::PUT,
            format!("/api/v1/registrations/{token}/topics/daily?app=crosswords"),
            REGISTER_KEY,
            Value::Null,
        ),
        (
            Method::POST,
            "/api/v1/notifications".to_owned(),
            SEND_KEY,
            json!({"app": "crosswords", "topics": ["daily"], "body": "Today's grid"}),
        ),
        (
            Method::PUT,
            format!("/api/v1/notifications/{}", uuid::Uuid::now_v7()),
            SEND_KEY,
            json!({"app": "crosswords", "topics": ["daily"], "body": "Today's grid", "send_at": scheduled_for}),
        ),
    ];
    for (method, path, key, body) in writes {
        let mut request = app.request(method.clone(), &path, Some(key));
        if !body.is_null() {
            request = request.json(&body);
        }
        let refused = request.send().await.expect("sent");
        let problem = expect_problem(refused, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
        assert_names_the_app(&problem, &format!("{method} {path}"));
    }
    app.stop().await;
}

fn assert_names_the_app(problem: &Value, what: &str) {
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("app `crosswords`") && detail.contains("default, puzzles, sport"),
        "{what}: {detail}"
    );
}

/// The values the document allows for `app`: per operation with an `app`
/// parameter, and for the two request bodies that take one.
fn apps_in(doc: &Value) -> (Vec<(String, Value)>, Value, Value) {
    let mut parameters = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                if parameter["name"] == "app" {
                    parameters.push((format!("{method} {path}"), parameter["schema"]["enum"].clone()));
                }
            }
        }
    }
    let schemas = &doc["components"]["schemas"];
    (
        parameters,
        schemas["SendRequest"]["properties"]["app"]["enum"].clone(),
        schemas["RegistrationRequest"]["properties"]["app"]["enum"].clone(),
    )
}

async fn openapi(app: &TestCoordinator) -> Value {
    app.request(Method::GET, "/api/v1/openapi.json", None)
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("a JSON document")
}

#[actix_web::test]
async fn the_openapi_document_gives_the_apps_served_and_follows_the_apps_file() {
    let apps = KeysFile::new(PUZZLES);
    let app = start_serving(&apps).await;
    let (parameters, send, register) = apps_in(&openapi(&app).await);
    // Reads, deletes and the topic a device follows take `?app=`.
    assert_eq!(parameters.len(), 7, "{parameters:?}");
    for (operation, values) in &parameters {
        assert_eq!(values, &json!(["default", "puzzles"]), "{operation}");
    }
    assert_eq!(send, json!(["default", "puzzles", null]));
    assert_eq!(register, json!(["default", "puzzles", null]));

    apps.write(PUZZLES_AND_SPORT);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (parameters, send, register) = apps_in(&openapi(&app).await);
        let all = json!(["default", "puzzles", "sport"]);
        if parameters.iter().all(|(_, values)| values == &all)
            && send == json!(["default", "puzzles", "sport", null])
        {
            assert_eq!(register, send);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the document still gives {send} after the apps file changed"
        );
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    }
    // Every app the document gives is one a registration is accepted in.
    let accepted = app
        .put_registration(
            &ios_token(9),
            json!({"app": "sport", "platform": "ios", "topics": ["scores"]}),
        )
        .await;
    assert_eq!(accepted.status(), StatusCode::OK);
    app.stop().await;
}
