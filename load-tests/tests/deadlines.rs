//! Calls to the outside have deadlines: a provider endpoint that takes the
//! connection and never answers fails the call in bounded time instead of
//! holding every push behind it.

use std::time::{Duration, Instant};

use clarion_dispatcher::fcm::auth::{TOKEN_FETCH_TIMEOUT, from_credentials};
use clarion_load_tests::testkit::Mocks;
use tokio::net::TcpListener;

#[tokio::test]
async fn a_hung_oauth2_token_endpoint_fails_the_token_request_within_its_deadline() {
    let mocks = Mocks::start().await;
    // Takes connections, reads nothing, answers nothing (no TLS handshake).
    let hanging = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let token_uri = format!("https://{}/token", hanging.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hanging.accept().await {
            held.push(socket);
        }
    });
    let mut account: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&mocks.fcm.credentials_file).unwrap()).unwrap();
    account["token_uri"] = token_uri.into();
    let credentials = mocks.ca_file.with_file_name("hung-token-endpoint.json");
    std::fs::write(&credentials, serde_json::to_vec(&account).unwrap()).unwrap();

    let (_, auth) = from_credentials(&credentials, Some(&mocks.ca_file))
        .await
        .expect("the service account reads");
    let started = Instant::now();
    // The outer bound only keeps a regression from hanging the suite.
    let answer = tokio::time::timeout(TOKEN_FETCH_TIMEOUT * 6, auth.header())
        .await
        .expect("the token request gave up by itself");
    let error = answer.expect_err("no token from a hung endpoint");
    assert!(error.contains("no answer"), "{error}");
    assert!(
        started.elapsed() >= TOKEN_FETCH_TIMEOUT - Duration::from_millis(100),
        "it waited its deadline, not less: {:?}",
        started.elapsed()
    );
}
