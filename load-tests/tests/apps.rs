//! Two apps in one installation, end to end: app `puzzles` has its own
//! Apple and Google (mocks with another bundle id, APNs key, Firebase
//! project and service account). It is added to the apps file while
//! everything runs; then a notification for it reaches only its devices,
//! through its credentials, and one for `default` only the default app's.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use clarion_load_tests::mocks::Received;
use clarion_load_tests::testkit::{
    APP_KEY, Cluster, ClusterOptions, DESK_KEY, Device, Mocks, alternating_devices,
};
use clarion_proto::Platform;
use reqwest::StatusCode;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);

async fn register(cluster: &Cluster, app: &str, device: &Device) {
    let response = cluster
        .http
        .put(format!("{}/api/v1/registrations/{}", cluster.base, device.token))
        .bearer_auth(APP_KEY)
        .json(&json!({"app": app, "platform": device.platform.as_str(), "topics": ["news/today"]}))
        .send()
        .await
        .expect("registration answered");
    assert_eq!(response.status(), StatusCode::OK, "{app} {}", device.token);
}

/// A GET with the desk's key, as JSON.
async fn read_as_desk(cluster: &Cluster, path: &str) -> Value {
    cluster
        .http
        .get(format!("{}{path}", cluster.base))
        .bearer_auth(DESK_KEY)
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON")
}

/// Sends to `app` and waits until it is complete.
async fn send_to(cluster: &Cluster, app: &str) -> Value {
    let (status, accepted) = cluster
        .send(&json!({"app": app, "topics": ["news/today"], "body": format!("For {app}")}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let id = accepted["id"].as_str().expect("an id").to_owned();
    let settled = cluster.wait_until_settled(&id, WAIT).await;
    assert_eq!(settled["status"], "complete", "{settled}");
    settled
}

fn tokens_received(pushes: &[Received]) -> BTreeSet<String> {
    pushes.iter().map(|push| push.token.clone()).collect()
}

fn tokens_of(devices: &[Device], platform: Platform) -> BTreeSet<String> {
    devices
        .iter()
        .filter(|d| d.platform == platform)
        .map(|d| d.token.clone())
        .collect()
}

/// The `kid` of the provider token a push was signed with.
fn apns_key_id(push: &Received) -> String {
    let jwt = push
        .header("authorization")
        .and_then(|value| value.strip_prefix("bearer "))
        .expect("a provider token");
    jsonwebtoken::decode_header(jwt)
        .expect("a JWT")
        .kid
        .expect("a key id")
}

#[actix_web::test]
async fn an_app_added_to_the_file_is_served_through_its_own_credentials_and_only_to_its_devices() {
    let dir = std::env::temp_dir().join(format!("clarion-apps-test-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let apps_file = dir.join("apps.toml");
    std::fs::write(&apps_file, "# no app but default yet\n").unwrap();
    let apps_arg = format!("--apps-file={}", apps_file.display());
    let mut cluster = Cluster::start(ClusterOptions {
        harvesters: 1,
        coordinator: vec![apps_arg.clone()],
        ..ClusterOptions::default()
    })
    .await;
    cluster.start_mocks().await;
    let puzzles = Mocks::start_as("com.example.puzzles", "PUZZLEK001", "example-puzzles").await;
    cluster.mocks().also_trust(&puzzles.ca_file);
    for platform in Platform::ALL {
        cluster.start_dispatcher(platform, &[&apps_arg]).await;
    }

    // The same topic name in both apps, and one token registered in both.
    let news = alternating_devices(4, &["news/today"]);
    let mut games: Vec<Device> = alternating_devices(8, &["news/today"]).split_off(4);
    games.push(news[0].clone());
    let (status, refused) = cluster
        .send(&json!({"app": "puzzles", "topics": ["news/today"], "body": "too early"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert!(
        refused["detail"].as_str().unwrap_or_default().contains("puzzles"),
        "{refused}"
    );

    // Added while everything runs: known once the file is read again.
    std::fs::write(&apps_file, puzzles.app_table("puzzles")).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let response = cluster
            .http
            .put(format!(
                "{}/api/v1/registrations/{}",
                cluster.base, games[0].token
            ))
            .bearer_auth(APP_KEY)
            .json(
                &json!({"app": "puzzles", "platform": games[0].platform.as_str(), "topics": ["news/today"]}),
            )
            .send()
            .await
            .expect("registration answered");
        if response.status() == StatusCode::OK {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the coordinator never learnt of app puzzles"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for device in &news {
        register(&cluster, "default", device).await;
    }
    for device in &games {
        register(&cluster, "puzzles", device).await;
    }

    let size = read_as_desk(&cluster, "/api/v1/topics/news/today?app=puzzles").await;
    assert_eq!(
        size["subscribers"],
        games.len(),
        "the topic of app puzzles: {size}"
    );
    let audience = read_as_desk(
        &cluster,
        "/api/v1/audience?topics=news/today,news/other&app=puzzles",
    )
    .await;
    assert_eq!(audience["devices"], games.len(), "{audience}");
    let found = read_as_desk(&cluster, "/api/v1/topics?q=news&app=puzzles").await;
    assert_eq!(found["topics"], json!(["news/today"]), "{found}");

    let settled = send_to(&cluster, "puzzles").await;
    assert_eq!(settled["app"], "puzzles", "{settled}");
    assert_eq!(settled["audience"]["total"], games.len(), "{settled}");
    let default_mocks = cluster.mocks();
    for platform in Platform::ALL {
        assert_eq!(
            default_mocks.state(platform).accounting.stats().accepted,
            0,
            "{platform}: nothing through default"
        );
        let pushes = puzzles.state(platform).received();
        assert_eq!(
            tokens_received(&pushes),
            tokens_of(&games, platform),
            "{platform}"
        );
        for push in &pushes {
            match platform {
                Platform::Ios => {
                    assert_eq!(push.header("apns-topic"), Some("com.example.puzzles"));
                    assert_eq!(apns_key_id(push), "PUZZLEK001");
                }
                Platform::Android => {
                    assert_eq!(push.path, "/v1/projects/example-puzzles/messages:send");
                }
                Platform::Web => {}
            }
        }
    }

    send_to(&cluster, "default").await;
    for platform in Platform::ALL {
        let pushes = default_mocks.state(platform).received();
        assert_eq!(tokens_received(&pushes), tokens_of(&news, platform), "{platform}");
        for push in pushes.iter().filter(|_| platform == Platform::Ios) {
            assert_eq!(push.header("apns-topic"), Some("com.clarion.news"));
            assert_eq!(apns_key_id(push), "CLARIONK01");
        }
        let stats = puzzles.state(platform).accounting.stats();
        assert_eq!(
            stats.accepted,
            tokens_of(&games, platform).len() as u64,
            "{platform}: nothing more for puzzles"
        );
    }
    cluster.stop().await;
    std::fs::remove_dir_all(&dir).unwrap();
}
