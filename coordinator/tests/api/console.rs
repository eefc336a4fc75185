//! The console: its page and files under a strict CSP, sign-in exchanging a
//! key for a session cookie, CSRF on changes, sign-out; and the two read
//! endpoints the compose page uses (topic search, deduplicated audience).

use reqwest::header::{CONTENT_SECURITY_POLICY, SET_COOKIE};
use reqwest::{Method, Response, StatusCode};
use serde_json::{Value, json};

use crate::common::*;

/// The `clarion_session=<token>` pair of a sign-in answer, and its
/// `Set-Cookie` header in full.
fn session_cookie(response: &Response) -> (String, String) {
    let header = response
        .headers()
        .get(SET_COOKIE)
        .and_then(|value| value.to_str().ok())
        .expect("a Set-Cookie header")
        .to_owned();
    let pair = header.split(';').next().expect("a cookie pair").trim().to_owned();
    (pair, header)
}

/// A request carrying the session cookie (and no key).
fn with_cookie(app: &TestCoordinator, method: Method, path: &str, cookie: &str) -> reqwest::RequestBuilder {
    app.request(method, path, None).header("cookie", cookie)
}

/// `GET path` with the newsroom key: 200 and its JSON.
async fn read(app: &TestCoordinator, path: &str) -> Value {
    let response = app.get(path, SEND_KEY).await;
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    response.json().await.expect("json")
}

/// `GET path` with the newsroom key: 422.
async fn refused(app: &TestCoordinator, path: &str) {
    expect_problem(
        app.get(path, SEND_KEY).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-request",
    )
    .await;
}

async fn sign_in(app: &TestCoordinator, key: &str) -> Response {
    app.request(Method::POST, "/console/session", None)
        .json(&json!({"api_key": key}))
        .send()
        .await
        .expect("sent")
}

#[actix_web::test]
async fn the_console_page_and_its_files_are_served_under_a_strict_policy() {
    let app = TestCoordinator::start().await;
    let page = app
        .request(Method::GET, "/console/", None)
        .send()
        .await
        .expect("sent");
    assert_eq!(page.status(), StatusCode::OK);
    let csp = page.headers()[CONTENT_SECURITY_POLICY]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    let html = page.text().await.expect("text");
    assert!(html.contains(r#"<script type="module" src="js/app.js">"#));
    // No inline script: every <script> has a src.
    assert_eq!(
        html.matches("<script").count(),
        html.matches("<script src=").count() + html.matches(r#"<script type="module" src="#).count()
    );

    let script = app
        .request(Method::GET, "/console/js/app.js", None)
        .send()
        .await
        .expect("sent");
    assert_eq!(script.status(), StatusCode::OK);
    assert_eq!(script.headers()["content-type"], "text/javascript; charset=utf-8");
    // The platforms module is written from proto's Platform::ALL.
    let platforms = app
        .request(Method::GET, "/console/js/platforms.js", None)
        .send()
        .await
        .expect("sent");
    assert_eq!(platforms.status(), StatusCode::OK);
    assert_eq!(
        platforms.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    let module = platforms.text().await.expect("text");
    for platform in clarion_proto::Platform::ALL {
        assert!(
            module.contains(&format!(r#""{}":"{}""#, platform.as_str(), platform.label())),
            "{module}"
        );
    }
    let chart = app
        .request(Method::GET, "/console/vendor/uPlot.iife.min.js", None)
        .send()
        .await
        .expect("sent");
    assert_eq!(chart.status(), StatusCode::OK);
    let missing = app
        .request(Method::GET, "/console/js/nothing.js", None)
        .send()
        .await
        .expect("sent");
    expect_problem(missing, StatusCode::NOT_FOUND, "not-found").await;
    let bare = app
        .http
        .get(format!("{}/console", app.base))
        .send()
        .await
        .expect("sent");
    assert_eq!(bare.url().path(), "/console/", "redirected to the page");
    app.stop().await;
}

#[actix_web::test]
async fn a_key_is_exchanged_for_a_session_cookie_that_acts_as_the_key() {
    let app = TestCoordinator::start().await;
    expect_problem(
        sign_in(&app, "wrong").await,
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
    )
    .await;
    // The console is for sending: a key that may only register is refused.
    expect_problem(
        sign_in(&app, REGISTER_KEY).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;

    let signed_in = sign_in(&app, SEND_KEY).await;
    assert_eq!(signed_in.status(), StatusCode::OK);
    let (cookie, header) = session_cookie(&signed_in);
    let attributes = header.to_ascii_lowercase();
    assert!(attributes.contains("httponly"), "{header}");
    assert!(attributes.contains("samesite=strict"), "{header}");
    assert!(
        attributes.contains("max-age=43200"),
        "12 hours by default: {header}"
    );
    assert!(!attributes.contains("secure"), "plain HTTP here: {header}");
    assert!(!cookie.contains(SEND_KEY), "the cookie is not the key");
    let session: Value = signed_in.json().await.expect("json");
    let csrf = session["csrf_token"].as_str().expect("a CSRF token").to_owned();
    assert_eq!(session["confirm_above"], 100_000);
    assert!(session["trace_url_template"].is_null());

    // Reads need the cookie only.
    let listed = with_cookie(&app, Method::GET, "/api/v1/notifications", &cookie)
        .send()
        .await
        .expect("sent");
    assert_eq!(listed.status(), StatusCode::OK);
    let body = json!({"topics": ["breaking/uk"], "body": "From the console"});
    // A change without the CSRF token is refused, and sends nothing.
    let forged = with_cookie(&app, Method::POST, "/api/v1/notifications", &cookie)
        .json(&body)
        .send()
        .await
        .expect("sent");
    expect_problem(forged, StatusCode::FORBIDDEN, "csrf-rejected").await;
    let wrong = with_cookie(&app, Method::POST, "/api/v1/notifications", &cookie)
        .header("x-csrf-token", "0".repeat(64))
        .json(&body)
        .send()
        .await
        .expect("sent");
    expect_problem(wrong, StatusCode::FORBIDDEN, "csrf-rejected").await;
    let sql = app.sql().await;
    let stored: i64 = sql
        .query_one("SELECT count(*) FROM notifications", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(stored, 0);
    let sent = with_cookie(&app, Method::POST, "/api/v1/notifications", &cookie)
        .header("x-csrf-token", &csrf)
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(sent.status(), StatusCode::ACCEPTED);
    // The send is the key's: same fingerprint as a Bearer send.
    let sender: String = sql
        .query_one("SELECT api_key_id FROM notifications", &[])
        .await
        .expect("row")
        .get(0);
    assert_eq!(Some(sender.as_str()), session["key_id"].as_str());
    // The session table holds digests, never the token or the key.
    let token = cookie.trim_start_matches("clarion_session=");
    let rows = sql
        .query("SELECT encode(token_digest, 'hex') || encode(key_digest, 'hex') || csrf_token FROM console_sessions", &[])
        .await
        .expect("sessions");
    assert_eq!(rows.len(), 1);
    let stored: String = rows[0].get(0);
    assert!(!stored.contains(token) && !stored.contains(SEND_KEY));

    // Sign-out ends the session: the cookie no longer works.
    let current = with_cookie(&app, Method::GET, "/console/session", &cookie)
        .send()
        .await
        .expect("sent");
    assert_eq!(current.status(), StatusCode::OK);
    let out = with_cookie(&app, Method::DELETE, "/console/session", &cookie)
        .header("x-csrf-token", &csrf)
        .send()
        .await
        .expect("sent");
    assert_eq!(out.status(), StatusCode::NO_CONTENT);
    let after = with_cookie(&app, Method::GET, "/api/v1/notifications", &cookie)
        .send()
        .await
        .expect("sent");
    expect_problem(after, StatusCode::UNAUTHORIZED, "unauthenticated").await;
    let audit: i64 = sql
        .query_one(
            "SELECT count(*) FROM audit_log WHERE action = 'console.session'",
            &[],
        )
        .await
        .expect("audit")
        .get(0);
    assert_eq!(audit, 2, "sign-in and sign-out are audited");
    app.stop().await;
}

#[actix_web::test]
async fn a_session_ends_when_it_expires_and_the_cookie_is_secure_behind_tls() {
    let app = TestCoordinator::start_with(&[
        "--console-session-hours=1",
        "--console-confirm-above=5000",
        "--trace-url-template=https://jaeger.example/trace/{trace_id}",
    ])
    .await;
    let signed_in = app
        .request(Method::POST, "/console/session", None)
        .header("x-forwarded-proto", "https")
        .json(&json!({"api_key": ADMIN_KEY}))
        .send()
        .await
        .expect("sent");
    assert_eq!(signed_in.status(), StatusCode::OK);
    let (cookie, header) = session_cookie(&signed_in);
    assert!(header.to_ascii_lowercase().contains("; secure"), "{header}");
    assert!(header.contains("Max-Age=3600"), "{header}");
    let session: Value = signed_in.json().await.expect("json");
    assert_eq!(session["confirm_above"], 5000);
    assert_eq!(
        session["trace_url_template"],
        "https://jaeger.example/trace/{trace_id}"
    );
    let sql = app.sql().await;
    sql.execute(
        "UPDATE console_sessions SET expires_at = now() - interval '1 second'",
        &[],
    )
    .await
    .expect("expire");
    let after = with_cookie(&app, Method::GET, "/api/v1/notifications", &cookie)
        .send()
        .await
        .expect("sent");
    expect_problem(after, StatusCode::UNAUTHORIZED, "unauthenticated").await;
    app.stop().await;
}

#[actix_web::test]
async fn topics_are_suggested_by_name_and_audiences_counted_once_per_device() {
    let app = TestCoordinator::start().await;
    // Devices 0..30 follow breaking/uk, 20..50 breaking/us: 50 devices, 60 subscriptions.
    for n in 0..50u64 {
        let mut topics = Vec::new();
        if n < 30 {
            topics.push("breaking/uk");
        }
        if n >= 20 {
            topics.push("breaking/us");
        }
        let token = if n % 2 == 0 {
            ios_token(n)
        } else {
            android_token(n)
        };
        let platform = if n % 2 == 0 { "ios" } else { "android" };
        let response = app
            .put_registration(&token, registration(platform, &topics))
            .await;
        assert!(response.status().is_success(), "{}", response.status());
    }
    app.put_registration(&ios_token(99), registration("ios", &["sport"]))
        .await;

    let found: Value = read(&app, "/api/v1/topics?q=BREAK").await;
    assert_eq!(found["topics"], json!(["breaking/uk", "breaking/us"]));
    let all: Value = read(&app, "/api/v1/topics?limit=2").await;
    assert_eq!(all["topics"].as_array().map(Vec::len), Some(2));
    refused(&app, "/api/v1/topics?limit=0").await;
    expect_problem(
        app.get("/api/v1/topics", REGISTER_KEY).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;

    let audience: Value = read(&app, "/api/v1/audience?topics=breaking/uk,breaking/us").await;
    assert_eq!(audience["subscriptions"], 60);
    assert_eq!(audience["devices"], 50);
    assert_eq!(audience["exact"], true);
    assert_eq!(audience["topics"][0]["topic"], "breaking/uk");
    assert_eq!(audience["topics"][0]["subscribers"], 30);
    assert_eq!(audience["topics"][1]["ios"], 15);
    let one: Value = read(&app, "/api/v1/audience?topics=sport").await;
    assert_eq!(one["devices"], 1);
    refused(&app, "/api/v1/audience?topics=").await;
    refused(&app, "/api/v1/audience?topics=a%20b").await;
    app.stop().await;
}

#[actix_web::test]
async fn asking_for_the_session_without_its_cookie_says_the_cookie_is_missing() {
    let app = TestCoordinator::start().await;
    // As the page asks on load (no cookie yet), and as a script with a key
    // would: neither is a console session.
    for key in [None, Some(SEND_KEY)] {
        let response = app
            .request(Method::GET, "/console/session", key)
            .send()
            .await
            .expect("sent");
        let problem = expect_problem(response, StatusCode::UNAUTHORIZED, "unauthenticated").await;
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("session cookie") && !detail.contains("Authorization"),
            "{key:?}: {detail}"
        );
    }
    app.stop().await;
}
