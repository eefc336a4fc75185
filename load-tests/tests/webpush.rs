//! Web push end to end: browsers' subscriptions registered through the
//! API, a send reaching them beside iOS and Android devices through the
//! web dispatcher, and the mock push service — which checks VAPID and opens
//! every message with the subscription's keys by its own RFC 8291 code —
//! answering as push services do: 201, 410 / 404 (gone: the cleanup path
//! and its safety valve), 401 (our VAPID key refused: the breaker, never a
//! cleanup), 429 with `Retry-After` (retried).

use std::collections::HashSet;
use std::time::Duration;

use clarion_load_tests::mocks::{FaultConfig, TestSubscription, digest};
use clarion_load_tests::testkit::{
    APP_KEY, Cluster, ClusterOptions, Device, alternating_devices, platforms_of, seed_devices,
};
use clarion_proto::Platform;
use reqwest::StatusCode;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);

fn options(dispatcher: &[&str]) -> ClusterOptions {
    ClusterOptions {
        harvesters: 1,
        // Small batches: the breaker judges between them.
        harvester: vec!["--batch-size=10".into()],
        dispatcher: dispatcher.iter().map(|s| s.to_string()).collect(),
        dispatchers: true,
        ..ClusterOptions::default()
    }
}

/// The registration token of browser `n` (16–128 of `[A-Za-z0-9_-]`).
fn browser(n: u64) -> String {
    format!("browser-{n:08}-{:016x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Subscribes browser `n` on the cluster's mock push service and
/// registers it through the API on `topics`.
async fn register_browser(cluster: &Cluster, n: u64, topics: &[&str]) -> TestSubscription {
    let subscription = cluster
        .mocks()
        .web
        .subscribe(&browser(n))
        .expect("the mock push service subscribes");
    let response = cluster
        .http
        .put(format!(
            "{}/api/v1/registrations/{}",
            cluster.base, subscription.token
        ))
        .bearer_auth(APP_KEY)
        .json(&subscription.registration(topics))
        .send()
        .await
        .expect("registration answered");
    let status = response.status();
    let body: Value = response.json().await.unwrap_or_default();
    assert_eq!(status, StatusCode::OK, "{body}");
    subscription
}

/// `count` browsers seeded straight into the database (faster than the
/// API for the valve's audiences), subscribed on the mock.
fn browsers(cluster: &Cluster, count: u64, topics: &[&str]) -> Vec<Device> {
    (0..count)
        .map(|n| Device::web(&cluster.mocks().web, n, topics))
        .collect()
}

async fn send(cluster: &Cluster, body: Value) -> String {
    let (status, accepted) = cluster.send(&body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    accepted["id"].as_str().expect("an id").to_owned()
}

/// The tokens of `tokens` still registered, and those with a subscription.
async fn still_there(cluster: &Cluster, tokens: &[String]) -> (HashSet<String>, HashSet<String>) {
    let sql = cluster.sql().await;
    let mut found = Vec::new();
    for table in ["registrations", "web_subscriptions"] {
        let rows = sql
            .query(
                &format!("SELECT DISTINCT token FROM {table} WHERE token = ANY($1)"),
                &[&tokens],
            )
            .await
            .expect("query");
        found.push(rows.iter().map(|row| row.get::<_, String>(0)).collect());
    }
    let subscribed = found.pop().unwrap_or_default();
    (found.pop().unwrap_or_default(), subscribed)
}

/// Prints what the mock push service saw, as the other fault tests do.
fn figures(cluster: &Cluster, test: &str, audience: u64) -> (u64, u64, u64) {
    let stats = cluster.mocks().state(Platform::Web).accounting.stats();
    let lost = audience.saturating_sub(stats.unique_tokens);
    println!(
        "{test}: delivered {}, duplicates {}, lost {lost}, answers {:?}",
        stats.unique_tokens, stats.duplicate_pushes, stats.by_status
    );
    (stats.unique_tokens, stats.duplicate_pushes, lost)
}

#[actix_web::test]
async fn every_browser_gets_one_decrypted_message_beside_the_apps_in_either_form() {
    let cluster = Cluster::start(options(&[])).await;
    let apps = alternating_devices(20, &["news/web"]);
    seed_devices(&cluster.sql().await, &apps).await.unwrap();
    let mut subscriptions = Vec::new();
    for n in 0..10 {
        subscriptions.push(register_browser(&cluster, n, &["news/web"]).await);
    }
    cluster.wait_for_topic_size("news/web", 30, WAIT).await;

    let id = send(
        &cluster,
        json!({"topics": ["news/web"], "title": "Breaking", "body": "It happened",
               "link": "https://news.example/1", "collapse_key": "breaking",
               "data": {"section": "world"}, "priority": "high"}),
    )
    .await;
    let status = cluster.wait_until_settled(&id, WAIT).await;
    assert_eq!(status["status"], "complete", "{status}");
    assert_eq!(status["audience"]["web"], 10, "{status}");
    assert_eq!(status["delivery"]["web"]["sent"], 10, "{status}");

    let mocks = cluster.mocks();
    let web_tokens: Vec<&str> = subscriptions.iter().map(|s| s.token.as_str()).collect();
    for platform in Platform::ALL {
        let stats = mocks.state(platform).accounting.stats();
        let expected: Vec<&str> = match platform {
            Platform::Web => web_tokens.clone(),
            _ => apps
                .iter()
                .filter(|d| d.platform == platform)
                .map(|d| d.token.as_str())
                .collect(),
        };
        assert_eq!(stats.unique_tokens, expected.len() as u64, "{platform}");
        assert_eq!(stats.duplicate_pushes, 0, "{platform}: one message each");
        assert_eq!(stats.digest, digest(expected), "{platform}: exactly the audience");
    }
    for subscription in &subscriptions {
        let push = mocks
            .web
            .state
            .received_by(&subscription.token)
            .unwrap_or_else(|| panic!("{} got nothing", subscription.token));
        // The body the mock decrypted with the subscription's own keys.
        assert_eq!(
            push.json(),
            json!({"title": "Breaking", "body": "It happened", "link": "https://news.example/1",
                   "data": {"section": "world"}, "notification_id": id})
        );
        assert_eq!(push.header("content-encoding"), Some("aes128gcm"));
        assert_eq!(push.header("urgency"), Some("high"));
        assert_eq!(push.header("topic"), Some("breaking"));
        assert!(push.header("ttl").is_some_and(|ttl| ttl.parse::<u64>().is_ok()));
    }

    // Declarative Web Push needs a link to navigate to.
    let (refused, problem) = cluster
        .send(&json!({"topics": ["news/web"], "body": "Nowhere", "web": {"declarative": true}}))
        .await;
    assert_eq!(refused, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert!(
        problem.to_string().contains("link"),
        "the problem names link: {problem}"
    );
    let declarative = send(
        &cluster,
        json!({"topics": ["news/web"], "title": "Results", "body": "Polls closed",
               "link": "https://news.example/2", "web": {"declarative": true},
               "lane": "bulk"}),
    )
    .await;
    let status = cluster.wait_until_settled(&declarative, WAIT).await;
    assert_eq!(status["delivery"]["web"]["sent"], 10, "{status}");
    for subscription in &subscriptions {
        let push = mocks
            .web
            .state
            .received_by(&subscription.token)
            .expect("a second message");
        // The bulk lane goes at `Urgency: low` whatever its priority.
        assert_eq!(push.header("urgency"), Some("low"));
        let message = push.json();
        assert_eq!(message["web_push"], 8030, "{message}");
        assert_eq!(message["notification"]["title"], "Results", "{message}");
        assert_eq!(message["notification"]["body"], "Polls closed", "{message}");
        assert_eq!(
            message["notification"]["navigate"], "https://news.example/2",
            "{message}"
        );
        assert_eq!(
            message["notification"]["data"]["notification_id"], declarative,
            "{message}"
        );
    }
    let stats = mocks.web.state.accounting.stats();
    assert_eq!(
        (stats.unique_tokens, stats.accepted),
        (10, 20),
        "two messages each"
    );
    cluster.stop().await;
}

#[actix_web::test]
async fn subscriptions_the_push_service_calls_gone_are_deleted_through_the_cleanup_path() {
    let cluster = Cluster::start(options(&[])).await;
    let mut subscriptions = Vec::new();
    for n in 0..40 {
        subscriptions.push(register_browser(&cluster, n, &["t"]).await);
    }
    let tokens: Vec<String> = subscriptions.iter().map(|s| s.token.clone()).collect();
    // 3 expired (410) and 1 unknown (404) of 40: 10%, under the valve's 20%.
    let gone = tokens[..4].to_vec();
    cluster.mocks().web.state.faults.set(FaultConfig {
        dead: tokens[..3].to_vec(),
        invalid: tokens[3..4].to_vec(),
        ..FaultConfig::default()
    });
    cluster.wait_for_topic_size("t", 40, WAIT).await;
    let id = send(&cluster, json!({"topics": ["t"], "body": "cleanup"})).await;
    let status = cluster.wait_until_settled(&id, WAIT).await;
    assert_eq!(status["status"], "complete", "{status}");
    let web = &status["delivery"]["web"];
    let answers = cluster.mocks().web.state.accounting.stats().by_status;
    assert_eq!(
        (web["sent"].as_u64(), web["unregistered"].as_u64()),
        (Some(36), Some(4)),
        "{answers:?} {status}"
    );
    assert_eq!(status["cleanup"]["suspect_segments"], json!([]), "{status}");
    cluster
        .wait_for_status(&id, WAIT, |s| s["cleanup"]["registrations_deleted"] == 4)
        .await;
    let (registered, subscribed) = still_there(&cluster, &tokens).await;
    let kept: HashSet<String> = tokens[4..].iter().cloned().collect();
    assert_eq!(registered, kept, "exactly the gone ones went");
    assert_eq!(subscribed, kept, "and their subscriptions with them");
    let by_status = cluster.mocks().web.state.accounting.stats().by_status;
    assert_eq!(by_status.get(&410), Some(&3), "gone subscriptions asked once");
    assert_eq!(by_status.get(&404), Some(&1));
    let (delivered, duplicates, lost) = figures(&cluster, "410/404 cleanup", 36);
    assert_eq!((delivered, duplicates, lost), (36, 0, 0));
    assert!(gone.iter().all(|token| !registered.contains(token)));
    cluster.stop().await;
}

#[actix_web::test]
async fn a_push_service_calling_every_subscription_gone_deletes_none_and_is_stopped_early() {
    const BREAKER: u64 = 20;
    let cluster = Cluster::start(options(&[&format!("--dispatch-breaker-pushes={BREAKER}")])).await;
    let mut all = alternating_devices(100, &["t"]);
    all.extend(browsers(&cluster, 200, &["t"]));
    seed_devices(&cluster.sql().await, &all).await.unwrap();
    cluster.mocks().web.state.faults.set(FaultConfig {
        dead_prefixes: vec![String::new()],
        ..FaultConfig::default()
    });
    let id = send(&cluster, json!({"topics": ["t"], "body": "misconfigured"})).await;
    let status = cluster.wait_until_settled(&id, WAIT).await;
    assert_eq!(status["cleanup"]["suspect_segments"], json!(["web"]), "{status}");
    assert_eq!(status["cleanup"]["registrations_deleted"], 0, "{status}");
    let web = &status["delivery"]["web"];
    let gone = web["unregistered"].as_u64().unwrap_or(0);
    assert_eq!(gone + web["held_back"].as_u64().unwrap_or(0), 200, "{status}");
    assert!(
        (BREAKER..=BREAKER + 60).contains(&gone),
        "the rest was held back: {gone} pushed"
    );
    for platform in [Platform::Ios, Platform::Android] {
        assert_eq!(status["delivery"][platform.as_str()]["sent"], 50, "{status}");
    }
    let everyone: Vec<String> = all.iter().map(|d| d.token.clone()).collect();
    let (registered, subscribed) = still_there(&cluster, &everyone).await;
    assert_eq!(registered.len(), 300, "the audience is intact");
    assert_eq!(subscribed.len(), 200, "every subscription is kept");
    println!("mass 410: {gone} pushed and answered gone, the rest held back, 0 deleted");
    cluster.stop().await;
}

#[actix_web::test]
async fn a_refused_vapid_key_trips_the_breaker_and_deletes_nothing() {
    const BREAKER: u64 = 20;
    let cluster = Cluster::start(options(&[&format!("--dispatch-breaker-pushes={BREAKER}")])).await;
    let all = browsers(&cluster, 200, &["t"]);
    seed_devices(&cluster.sql().await, &all).await.unwrap();
    // The push service refuses our VAPID credentials on every push.
    cluster.mocks().web.state.faults.set(FaultConfig {
        error_rates: [(401, 1.0)].into(),
        ..FaultConfig::default()
    });
    let id = send(&cluster, json!({"topics": ["t"], "body": "refused"})).await;
    let status = cluster.wait_until_settled(&id, WAIT).await;
    let web = &status["delivery"]["web"];
    let failed = web["failed"].as_u64().unwrap_or(0);
    let held_back = web["held_back"].as_u64().unwrap_or(0);
    assert_eq!(failed + held_back, 200, "{status}");
    assert!(
        (BREAKER..=BREAKER + 60).contains(&failed),
        "the breaker held the rest back: {failed} pushed"
    );
    assert_eq!(
        web["unregistered"], 0,
        "a 401 calls no subscription gone: {status}"
    );
    assert_eq!(status["cleanup"]["registrations_deleted"], 0, "{status}");
    let tokens: Vec<String> = all.iter().map(|d| d.token.clone()).collect();
    let (registered, subscribed) = still_there(&cluster, &tokens).await;
    assert_eq!(
        (registered.len(), subscribed.len()),
        (200, 200),
        "nothing deleted"
    );
    let refused = cluster
        .mocks()
        .web
        .state
        .accounting
        .stats()
        .by_status
        .get(&401)
        .copied();
    assert_eq!(
        refused,
        Some(failed),
        "each failure was a 401 from the push service"
    );
    println!("401: {failed} pushed and refused, {held_back} held back, 0 deleted");
    cluster.stop().await;
}

#[actix_web::test]
async fn a_throttling_push_service_is_retried_until_every_browser_has_it_once() {
    let cluster = Cluster::start(options(&["--dispatch-max-attempts=12"])).await;
    let mut all = alternating_devices(60, &["t"]);
    all.extend(browsers(&cluster, 150, &["t"]));
    seed_devices(&cluster.sql().await, &all).await.unwrap();
    cluster.mocks().web.state.faults.set(FaultConfig {
        error_rates: [(429, 0.3), (503, 0.1)].into(),
        retry_after_s: Some(1),
        ..FaultConfig::default()
    });
    let id = send(&cluster, json!({"topics": ["t"], "body": "persistent"})).await;
    let status = cluster.wait_until_settled(&id, WAIT).await;
    assert_eq!(status["status"], "complete", "{status}");
    let stats = cluster.mocks().web.state.accounting.stats();
    assert!(
        stats.by_status.get(&429).copied().unwrap_or(0) > 10,
        "the throttle was hit: {:?}",
        stats.by_status
    );
    for platform in platforms_of(&all) {
        let delivery = &status["delivery"][platform.as_str()];
        let expected = all.iter().filter(|d| d.platform == platform).count();
        assert_eq!(delivery["sent"], expected, "{platform}: {status}");
        assert_eq!(delivery["failed"], 0, "{platform}: {status}");
    }
    let (delivered, duplicates, lost) = figures(&cluster, "429/503 with Retry-After", 150);
    assert_eq!((delivered, duplicates, lost), (150, 0, 0));
    cluster.stop().await;
}

/// The demo's and the benchmark's browsers: seeded with `COPY` beside the
/// apps' devices, a few key pairs shared among them, and every message
/// still opened by the mock (tests sample nothing).
#[actix_web::test]
async fn a_seeded_audience_with_a_web_share_gets_every_message_opened() {
    use clarion_load_tests::audience::{AudienceShape, Layout, device};
    use clarion_load_tests::seed::{SeedPlan, seed, seed_web_subscriptions};

    let cluster = Cluster::start(options(&[])).await;
    let plan = SeedPlan {
        devices: 300,
        shape: AudienceShape {
            web_percent: 40,
            ios_percent: 50,
            dead_percent: 0,
            layout: Layout::Single,
            locales: 0,
        },
        fresh: false,
        apps: 1,
        receipts: false,
    };
    let sql = cluster.sql().await;
    seed(&sql, &plan, false).await.expect("seeded");
    let web = &cluster.mocks().web;
    web.accept_seeded().expect("the mock knows the seeded browsers");
    let written = seed_web_subscriptions(&sql, &plan, &web.origin)
        .await
        .expect("subscriptions seeded");
    let devices: Vec<_> = (0..plan.devices).map(|n| device(n, plan.shape)).collect();
    let browsers: Vec<&str> = devices
        .iter()
        .filter(|d| d.platform == Platform::Web)
        .map(|d| d.token.as_str())
        .collect();
    assert_eq!(written, browsers.len() as u64);
    assert!((90..150).contains(&written), "{written} browsers of 300");
    cluster.wait_for_topic_size("breaking/uk", 300, WAIT).await;

    let id = send(
        &cluster,
        json!({"topics": ["breaking/uk"], "title": "Seeded", "body": "Every browser"}),
    )
    .await;
    let status = cluster.wait_until_settled(&id, WAIT).await;
    assert_eq!(status["status"], "complete", "{status}");
    assert_eq!(status["delivery"]["web"]["sent"], written, "{status}");
    let mocks = cluster.mocks();
    for platform in Platform::ALL {
        let expected: Vec<&str> = devices
            .iter()
            .filter(|d| d.platform == platform)
            .map(|d| d.token.as_str())
            .collect();
        let stats = mocks.state(platform).accounting.stats();
        assert_eq!(stats.duplicate_pushes, 0, "{platform}");
        assert_eq!(stats.digest, digest(expected), "{platform}: exactly the audience");
    }
    for token in &browsers {
        let push = mocks
            .web
            .state
            .received_by(token)
            .unwrap_or_else(|| panic!("{token} got nothing"));
        assert_eq!(push.json()["notification_id"], id, "{token}");
    }
}
