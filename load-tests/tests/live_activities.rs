//! Live Activities end to end (issue 38), against the mock APNs: push-to-
//! start tokens registered beside device tokens never get an alert.

use std::time::Duration;

use clarion_load_tests::mocks::digest;
use clarion_load_tests::testkit::{APP_KEY, Cluster, ClusterOptions};
use clarion_proto::Platform;
use reqwest::StatusCode;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);

fn options() -> ClusterOptions {
    ClusterOptions {
        harvesters: 1,
        dispatchers: true,
        ..ClusterOptions::default()
    }
}

/// The APNs token of phone `n` (`kind` tells device from push-to-start).
fn token(kind: u64, n: u64) -> String {
    format!("{kind:016x}{:048x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
}

async fn register(cluster: &Cluster, token: &str, body: Value) {
    let response = cluster
        .http
        .put(format!("{}/api/v1/registrations/{token}", cluster.base))
        .bearer_auth(APP_KEY)
        .json(&body)
        .send()
        .await
        .expect("registration answered");
    let status = response.status();
    let answer: Value = response.json().await.unwrap_or_default();
    assert_eq!(status, StatusCode::OK, "{answer}");
}

#[actix_web::test]
async fn an_alert_skips_push_to_start_tokens() {
    let cluster = Cluster::start(options()).await;
    let devices: Vec<String> = (0..6).map(|n| token(1, n)).collect();
    let starters: Vec<String> = (0..6).map(|n| token(2, n)).collect();
    for device in &devices {
        register(
            &cluster,
            device,
            json!({"platform": "ios", "topics": ["sport/football"]}),
        )
        .await;
    }
    for starter in &starters {
        register(
            &cluster,
            starter,
            json!({"platform": "ios", "kind": "push_to_start", "attributes_type": "MatchAttributes",
                   "topics": ["sport/football"]}),
        )
        .await;
    }
    let (status, accepted) = cluster
        .send(&json!({"topics": ["sport/football"], "title": "Goal", "body": "1-0"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let id = accepted["id"].as_str().expect("an id");
    let settled = cluster.wait_until_settled(id, WAIT).await;
    assert_eq!(settled["status"], "complete", "{settled}");
    assert_eq!(settled["audience"]["ios"], 6, "{settled}");
    let stats = cluster.mocks().state(Platform::Ios).accounting.stats();
    println!(
        "an alert to 6 devices and 6 push-to-start tokens: delivered {}, duplicates {}, \
         push-to-start tokens reached 0 expected",
        stats.unique_tokens, stats.duplicate_pushes
    );
    assert_eq!(stats.unique_tokens, 6);
    assert_eq!(stats.duplicate_pushes, 0);
    assert_eq!(
        stats.digest,
        digest(devices.iter().map(String::as_str)),
        "exactly the device tokens, no push-to-start token"
    );
    cluster.stop().await;
}
