//! An installation whose apps are all in the apps file, end to end: no
//! `default` credentials anywhere (no `CLARION_APNS_*` / `CLARION_FCM_*`).
//! App `news` and app `puzzles` each have their own Apple and Google
//! (mocks with their own bundle id, APNs key, Firebase project and service
//! account); app `weather` has only APNs credentials. Each platform's
//! dispatcher serves every app of its platform; a batch it cannot serve
//! (`weather` on Android) is refused at once, and its notification fails
//! naming the app and the platform, long before the watchdog would. A
//! dispatcher with no app at all for its platform does not start, and says
//! both ways to give it one.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use clarion_load_tests::mocks::Received;
use clarion_load_tests::testkit::{APP_KEY, Cluster, ClusterOptions, Device, Mocks, alternating_devices};
use clarion_proto::Platform;
use reqwest::StatusCode;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);
/// How long a refused send may take to end: far below the watchdog's ten
/// minutes, which is how such a send ended before.
const REFUSED_WITHIN: Duration = Duration::from_secs(60);

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

/// Sends to `app`; returns the notification's id.
async fn send_to(cluster: &Cluster, app: &str) -> String {
    let (status, accepted) = cluster
        .send(&json!({"app": app, "topics": ["news/today"], "body": format!("For {app}")}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    accepted["id"].as_str().expect("an id").to_owned()
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

/// An apps file table giving app `app` only the APNs credentials of `mocks`,
/// in the flat `apns_*` form (still parsed beside `[apps.<id>.apns]`).
fn apns_only_table(app: &str, mocks: &Mocks) -> String {
    let apns = &mocks.apns;
    format!(
        "[apps.{app}]\napns_topic = {topic:?}\napns_key_file = {key:?}\napns_key_id = {key_id:?}\n\
         apns_team_id = {team:?}\napns_endpoint = {endpoint:?}\napns_sandbox_endpoint = {endpoint:?}\n",
        topic = apns.bundle_id,
        key = apns.key_file.display().to_string(),
        key_id = apns.key_id,
        team = apns.team_id,
        endpoint = apns.endpoint,
    )
}

/// Flags of a dispatcher with only an apps file (and the CAs to trust).
fn apps_only_flags(apps_file: &Path, ca_file: &Path) -> Vec<String> {
    vec![
        format!("--apps-file={}", apps_file.display()),
        format!("--extra-ca-file={}", ca_file.display()),
    ]
}

#[actix_web::test]
async fn a_dispatcher_with_only_an_apps_file_serves_each_app_of_its_platform_and_refuses_the_others() {
    let dir = std::env::temp_dir().join(format!("clarion-apps-only-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let news = Mocks::start_as("com.example.news", "NEWSKEY001", "example-news").await;
    let puzzles = Mocks::start_as("com.example.puzzles", "PUZZLEK001", "example-puzzles").await;
    news.also_trust(&puzzles.ca_file);
    let apps_file = dir.join("apps.toml");
    let apps = [
        news.app_table("news"),
        puzzles.app_table("puzzles"),
        apns_only_table("weather", &news),
    ];
    std::fs::write(&apps_file, apps.join("\n")).unwrap();
    let mut cluster = Cluster::start(ClusterOptions {
        harvesters: 1,
        coordinator: vec![format!("--apps-file={}", apps_file.display())],
        ..ClusterOptions::default()
    })
    .await;
    let mut dispatchers = Vec::new();
    for platform in Platform::ALL {
        let started = cluster
            .try_start_dispatcher_with(platform, apps_only_flags(&apps_file, &news.ca_file))
            .await;
        match started {
            Ok(index) => dispatchers.push(index),
            Err(err) => panic!("the {platform} dispatcher refused an apps file alone: {err}"),
        }
    }

    let news_devices = alternating_devices(4, &["news/today"]);
    let puzzles_devices = alternating_devices(8, &["news/today"]).split_off(4);
    let weather_devices: Vec<Device> = alternating_devices(12, &["news/today"])
        .split_off(8)
        .into_iter()
        .filter(|d| d.platform == Platform::Android)
        .collect();
    for (app, devices) in [
        ("news", &news_devices),
        ("puzzles", &puzzles_devices),
        ("weather", &weather_devices),
    ] {
        for device in devices {
            register(&cluster, app, device).await;
        }
    }

    // Each app through its own credentials, to its own devices only.
    for (app, devices, mocks, other) in [
        ("news", &news_devices, &news, &puzzles),
        ("puzzles", &puzzles_devices, &puzzles, &news),
    ] {
        let id = send_to(&cluster, app).await;
        let settled = cluster.wait_until_settled(&id, WAIT).await;
        assert_eq!(settled["status"], "complete", "{app}: {settled}");
        let sent: u64 = Platform::ALL
            .iter()
            .map(|platform| {
                settled["delivery"][platform.as_str()]["sent"]
                    .as_u64()
                    .unwrap_or(0)
            })
            .sum();
        assert_eq!(sent, devices.len() as u64, "{app}: {settled}");
        for platform in Platform::ALL {
            let pushes = mocks.state(platform).received();
            assert_eq!(
                tokens_received(&pushes),
                tokens_of(devices, platform),
                "{app} {platform}"
            );
            for push in pushes.iter().filter(|_| platform == Platform::Ios) {
                assert_eq!(push.header("apns-topic"), Some(mocks.apns.bundle_id.as_str()));
            }
            for push in pushes.iter().filter(|_| platform == Platform::Android) {
                let path = format!("/v1/projects/{}/messages:send", mocks.fcm.project_id);
                assert_eq!(push.path, path, "{app}");
            }
        }
        for platform in Platform::ALL {
            let others = tokens_received(&other.state(platform).received());
            assert!(
                others.is_disjoint(&tokens_of(devices, platform)),
                "{app} {platform}: nothing through another app's credentials"
            );
        }
    }

    // No Android credentials for `weather` anywhere: refused at once,
    // never retried, and the status says which app and platform.
    let started = Instant::now();
    let id = send_to(&cluster, "weather").await;
    let settled = cluster.wait_until_settled(&id, REFUSED_WITHIN).await;
    assert!(started.elapsed() < REFUSED_WITHIN);
    assert_eq!(settled["status"], "failed", "{settled}");
    let reason = settled["failure_reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("app_not_configured"), "{settled}");
    assert!(
        reason.contains("`weather`") && reason.contains("android"),
        "names the app and the platform: {reason}"
    );
    assert_eq!(
        settled["delivery"]["android"]["failed"],
        weather_devices.len(),
        "{settled}"
    );
    let android_pushes = news.state(Platform::Android).accounting.stats().accepted
        + puzzles.state(Platform::Android).accounting.stats().accepted;
    assert_eq!(
        android_pushes,
        (tokens_of(&news_devices, Platform::Android).len()
            + tokens_of(&puzzles_devices, Platform::Android).len()) as u64,
        "nothing of weather pushed with another app's credentials"
    );
    // `/readyz` is about the process, not about one app it cannot serve.
    for index in dispatchers {
        let addr = cluster.dispatchers[index].health.addr;
        let ready = cluster
            .http
            .get(format!("http://{addr}/readyz"))
            .send()
            .await
            .expect("readyz answered");
        assert_eq!(ready.status(), StatusCode::OK);
    }
    cluster.stop().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[actix_web::test]
async fn a_dispatcher_with_no_app_for_its_platform_refuses_to_start_naming_both_ways_to_give_it_one() {
    let dir = std::env::temp_dir().join(format!("clarion-no-app-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let mocks = Mocks::start_as("com.example.weather", "WEATHERK01", "example-weather").await;
    let apps_file = dir.join("apps.toml");
    std::fs::write(&apps_file, apns_only_table("weather", &mocks)).unwrap();
    let mut cluster = Cluster::start(ClusterOptions::default()).await;
    let flags = apps_only_flags(&apps_file, &mocks.ca_file);

    for (platform, flags, default_settings) in [
        (Platform::Android, flags.clone(), "CLARION_FCM_CREDENTIALS_FILE"),
        (
            Platform::Ios,
            vec![format!("--extra-ca-file={}", mocks.ca_file.display())],
            "CLARION_APNS_KEY_FILE",
        ),
    ] {
        let refused = cluster
            .try_start_dispatcher_with(platform, flags)
            .await
            .expect_err("no app to serve: no start");
        let message = refused.to_string();
        let table = format!("[apps.<id>.{}]", platform.channel());
        for way in [default_settings, table.as_str(), "CLARION_APPS_FILE"] {
            assert!(message.contains(way), "{platform}: names {way}: {message}");
        }
        assert!(message.contains(platform.as_str()), "{message}");
    }
    // The same apps file serves iOS.
    cluster
        .try_start_dispatcher_with(Platform::Ios, flags)
        .await
        .expect("app weather has APNs credentials");
    cluster.stop().await;
    std::fs::remove_dir_all(&dir).unwrap();
}
