//! Delivery end to end over the real PostgreSQL and RabbitMQ and both mocks:
//! coordinator → harvesters → dispatchers → mock APNs / FCM → reports.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use clarion_load_tests::mocks::{FaultConfig, digest};
use clarion_load_tests::testkit::{
    ADMIN_KEY, Cluster, ClusterOptions, Device, Mocks, alternating_devices, platforms_of, seed_devices,
};
use clarion_proto::Platform;
use reqwest::StatusCode;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);

fn options(coordinator: &[&str], harvester: &[&str], dispatcher: &[&str]) -> ClusterOptions {
    let owned = |args: &[&str]| args.iter().map(|s| s.to_string()).collect();
    ClusterOptions {
        coordinator: owned(coordinator),
        harvester: owned(harvester),
        harvesters: 1,
        dispatcher: owned(dispatcher),
        dispatchers: true,
        ..ClusterOptions::default()
    }
}

fn tokens(devices: &[Device], platform: Platform) -> Vec<String> {
    devices
        .iter()
        .filter(|d| d.platform == platform)
        .map(|d| d.token.clone())
        .collect()
}

/// Each of `devices` got exactly one push from the mocks, and nobody else.
fn each_device_pushed_once(mocks: &Mocks, devices: &[Device]) {
    for platform in Platform::ALL {
        let expected = tokens(devices, platform);
        let stats = mocks.state(platform).accounting.stats();
        assert_eq!(stats.unique_tokens, expected.len() as u64, "{platform}");
        assert_eq!(stats.duplicate_pushes, 0, "{platform}: nobody gets two pushes");
        assert_eq!(
            stats.digest,
            digest(expected.iter().map(String::as_str)),
            "{platform}: exactly the audience"
        );
    }
}

async fn send(cluster: &Cluster, body: Value) -> String {
    let (status, accepted) = cluster.send(&body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    accepted["id"].as_str().expect("an id").to_owned()
}

#[actix_web::test]
async fn every_device_gets_exactly_one_push_and_the_counters_match_the_mocks() {
    let cluster = Cluster::start(options(&["--tokens-per-job=100"], &["--batch-size=50"], &[])).await;
    let mut all = alternating_devices(300, &["breaking/uk"]);
    all.extend(
        alternating_devices(100, &["breaking/us"])
            .into_iter()
            .map(|mut d| {
                d.token = d.token.replacen('0', "f", 1);
                d
            }),
    );
    // A third of the first group follows both topics: still one push each.
    for device in all.iter_mut().take(100) {
        device.topics.push("breaking/us".into());
    }
    seed_devices(&cluster.sql().await, &all).await.unwrap();

    let id = send(
        &cluster,
        json!({"topics": ["breaking/uk", "breaking/us"], "title": "Breaking", "body": "It happened",
               "link": "https://news.example/1", "collapse_key": "breaking", "data": {"section": "world"}}),
    )
    .await;
    let status = cluster.wait_until_settled(&id, WAIT).await;
    assert_eq!(status["status"], "complete", "{status}");

    let mocks = cluster.mocks();
    each_device_pushed_once(mocks, &all);
    for platform in platforms_of(&all) {
        let expected = tokens(&all, platform);
        let stats = mocks.state(platform).accounting.stats();
        let delivery = &status["delivery"][platform.as_str()];
        assert_eq!(
            delivery["sent"], stats.accepted,
            "{platform}: the status agrees with the mock"
        );
        assert_eq!(status["audience"][platform.as_str()], expected.len());
    }
    let apns = mocks.state(Platform::Ios).sample().expect("an APNs body");
    assert_eq!(apns["aps"]["alert"]["title"], "Breaking");
    assert_eq!(apns["aps"]["thread-id"], "breaking");
    assert_eq!(apns["section"], "world");
    let fcm = mocks.state(Platform::Android).sample().expect("an FCM body");
    assert_eq!(fcm["message"]["notification"]["body"], "It happened");
    assert_eq!(fcm["message"]["android"]["collapse_key"], "breaking");
    assert_eq!(fcm["message"]["data"]["link"], "https://news.example/1");

    assert_eq!(status["delivered_percent"], 100.0);
    assert!(status["timings"]["t90_ms"].as_u64().is_some(), "{status}");
    assert_eq!(status["ninety_in_two"], true);
    cluster.stop().await;
}

#[actix_web::test]
async fn a_scheduled_send_reaches_every_device_once_when_it_fires_and_is_timed_from_then() {
    let cluster = Cluster::start(options(&[], &["--batch-size=20"], &[])).await;
    let devices = alternating_devices(60, &["briefing/uk"]);
    seed_devices(&cluster.sql().await, &devices).await.unwrap();
    let send_at = chrono::Utc::now() + chrono::Duration::seconds(3);
    let (status, accepted) = cluster
        .send(
            &json!({"topics": ["briefing/uk"], "title": "Briefing", "body": "Five things",
                      "lane": "bulk", "send_at": send_at.to_rfc3339()}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    assert_eq!(accepted["status"], "scheduled");
    let id = accepted["id"].as_str().expect("an id").to_owned();
    assert_eq!(cluster.status(&id).await["status"], "scheduled");
    let mocks = cluster.mocks();
    for platform in Platform::ALL {
        assert_eq!(
            mocks.state(platform).accounting.stats().unique_tokens,
            0,
            "{platform}: not before its time"
        );
    }

    let status = cluster.wait_until_settled(&id, WAIT).await;
    assert_eq!(status["status"], "complete", "{status}");
    let time = |name: &str| -> chrono::DateTime<chrono::Utc> {
        status[name]
            .as_str()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{name}: {status}"))
    };
    let (created_at, fired_at) = (time("created_at"), time("fired_at"));
    assert!(fired_at >= time("send_at"), "{status}");
    each_device_pushed_once(mocks, &devices);
    // Timed from the firing: t90 lies within the firing → completion window
    // (accepts happen after the firing and before completion; one accept
    // bucket of slack). Counted from the request it would also hold the
    // seconds the notification waited, which exceed what is left of the
    // send after its 90% mark: the window bounds t90 without a race against
    // how fast a busy machine delivers.
    let t90 = status["timings"]["t90_ms"].as_i64().expect("t90 reached");
    let waited = (fired_at - created_at).num_milliseconds();
    assert!(waited >= 2_500, "it waited for its time: {status}");
    let window = (time("completed_at") - fired_at).num_milliseconds();
    assert!(
        t90 <= window + 50,
        "t90 {t90} ms counts from the firing: the firing-to-completion window is {window} ms (the wait was {waited} ms)"
    );
    assert_eq!(status["ninety_in_two"], true);
    cluster.stop().await;
}

async fn registered(cluster: &Cluster, tokens: &[String]) -> HashSet<String> {
    cluster
        .sql()
        .await
        .query(
            "SELECT DISTINCT token FROM registrations WHERE token = ANY($1)",
            &[&tokens],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[actix_web::test]
async fn dead_tokens_are_cleaned_up_and_invalid_ones_are_never_retried() {
    let cluster = Cluster::start(options(&[], &["--batch-size=30"], &[])).await;
    let all = alternating_devices(200, &["t"]);
    seed_devices(&cluster.sql().await, &all).await.unwrap();
    let mut gone = Vec::new();
    let mut invalid = Vec::new();
    for platform in platforms_of(&all) {
        let tokens = tokens(&all, platform);
        gone.extend(tokens[..5].iter().cloned());
        invalid.extend(tokens[5..8].iter().cloned());
        // On Android one of them belongs to another Firebase project.
        let (malformed, foreign) = match platform {
            Platform::Ios => (tokens[5..8].to_vec(), Vec::new()),
            Platform::Android => (tokens[5..7].to_vec(), tokens[7..8].to_vec()),
            Platform::Web => unreachable!("an alternating audience has no browser"),
        };
        cluster.mocks().state(platform).faults.set(FaultConfig {
            dead: tokens[..5].to_vec(),
            invalid: malformed,
            foreign,
            ..FaultConfig::default()
        });
    }

    let id = send(&cluster, json!({"topics": ["t"], "body": "cleanup"})).await;
    let status = cluster.wait_until_settled(&id, WAIT).await;
    assert_eq!(status["status"], "complete", "{status}");
    for platform in platforms_of(&all) {
        let delivery = &status["delivery"][platform.as_str()];
        assert_eq!(
            (delivery["unregistered"].as_u64(), delivery["invalid"].as_u64()),
            (Some(5), Some(3))
        );
        assert_eq!(delivery["sent"], 92);
        let by_status = cluster.mocks().state(platform).accounting.stats().by_status;
        let refused = if platform == Platform::Ios { 410 } else { 404 };
        assert_eq!(
            by_status.get(&refused),
            Some(&5),
            "{platform}: gone tokens asked once"
        );
        let refused_as_invalid: u64 = [400, 403].iter().filter_map(|s| by_status.get(s)).sum();
        assert_eq!(
            refused_as_invalid, 3,
            "{platform}: invalid tokens are not retried"
        );
    }
    // Timings count the reachable audience: the gone devices are left out.
    assert!(status["timings"]["t90_ms"].as_u64().is_some(), "{status}");
    // Delivery against both: 184 of 200 devices, 184 of the 190 not gone
    // (the invalid ones stay in the reachable audience).
    assert_eq!(status["audience"]["total"], 200, "{status}");
    assert_eq!(status["audience"]["reachable"], 190, "{status}");
    assert_eq!(status["delivered_percent"], 92.0, "{status}");
    assert_eq!(status["delivered_percent_of_reachable"], 96.84, "{status}");
    // 3 invalid of each segment's 100 pushes is 3%, under the 5% threshold,
    // and 5 gone is 5%, under 20%: deleted. The last batch's cleanups may
    // be counted just after the completion: wait for them.
    assert_eq!(status["cleanup"]["invalid_tokens"], "deleted");
    assert_eq!(status["cleanup"]["suspect_segments"], json!([]));
    cluster
        .wait_for_status(&id, WAIT, |s| s["cleanup"]["registrations_deleted"] == 16)
        .await;
    let remaining = registered(&cluster, &[gone.clone(), invalid.clone()].concat()).await;
    assert!(remaining.is_empty(), "still registered: {remaining:?}");
    let others: Vec<String> = all
        .iter()
        .map(|d| d.token.clone())
        .filter(|t| !gone.contains(t) && !invalid.contains(t))
        .collect();
    assert_eq!(
        registered(&cluster, &others).await.len(),
        others.len(),
        "nobody else is deleted"
    );
    cluster.stop().await;
}

#[actix_web::test]
async fn a_burst_of_invalid_tokens_deletes_nothing_and_marks_the_notification() {
    let cluster = Cluster::start(options(&[], &[], &[])).await;
    let all = alternating_devices(100, &["t"]);
    seed_devices(&cluster.sql().await, &all).await.unwrap();
    // What a sandbox build's tokens sent to production look like: a burst of
    // BadDeviceToken (15 of 100 devices, far over the 5% threshold).
    let ios = tokens(&all, Platform::Ios);
    cluster.mocks().state(Platform::Ios).faults.set(FaultConfig {
        invalid: ios[..15].to_vec(),
        ..FaultConfig::default()
    });
    let id = send(&cluster, json!({"topics": ["t"], "body": "misconfigured"})).await;
    let status = cluster.wait_until_settled(&id, WAIT).await;
    assert_eq!(status["delivery"]["ios"]["invalid"], 15);
    assert_eq!(status["cleanup"]["invalid_tokens"], "kept", "{status}");
    assert_eq!(status["cleanup"]["suspect_configuration"], true);
    assert_eq!(status["cleanup"]["suspect_segments"], json!(["ios/production"]));
    assert_eq!(status["ninety_in_two"], false, "a tripped valve is never 90in2");
    assert_eq!(status["cleanup"]["registrations_deleted"], 0);
    let everyone: Vec<String> = all.iter().map(|d| d.token.clone()).collect();
    assert_eq!(
        registered(&cluster, &everyone).await.len(),
        100,
        "the audience is intact"
    );

    // The kept tokens stay held (cleanups arriving after completion too)
    // until an admin, having checked, releases them: exactly those go.
    let held_path = format!("{}/api/v1/notifications/{id}/held", cluster.base);
    let deadline = Instant::now() + WAIT;
    loop {
        let held: Value = cluster
            .http
            .get(&held_path)
            .bearer_auth(ADMIN_KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if held["total"] == 15 {
            assert_eq!(
                held["segments"],
                json!([{"segment": "ios/production", "gone": 0, "invalid": 15, "total": 15}])
            );
            break;
        }
        assert!(Instant::now() < deadline, "15 tokens held: {held}");
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
    let released: Value = cluster
        .http
        .post(format!("{held_path}/release"))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(released["registrations_deleted"], 15, "{released}");
    let left = registered(&cluster, &everyone).await;
    assert_eq!(left.len(), 85);
    assert!(
        ios[..15].iter().all(|token| !left.contains(token)),
        "the invalid ones went"
    );
    cluster.stop().await;
}

/// Sends to `devices` (on topic `t`) and checks that no registration was
/// deleted and that the valve names `suspect` as the suspect segments.
async fn sends_and_keeps_everyone(cluster: &Cluster, devices: &[Device], suspect: Value) -> Value {
    let id = send(cluster, json!({"topics": ["t"], "body": "misconfigured"})).await;
    let status = cluster.wait_until_settled(&id, WAIT).await;
    assert_eq!(status["cleanup"]["suspect_segments"], suspect, "{status}");
    assert_eq!(status["cleanup"]["invalid_tokens"], "kept", "{status}");
    assert_eq!(status["ninety_in_two"], false, "{status}");
    assert_eq!(status["cleanup"]["registrations_deleted"], 0, "{status}");
    let everyone: Vec<String> = devices.iter().map(|d| d.token.clone()).collect();
    assert_eq!(
        registered(cluster, &everyone).await.len(),
        devices.len(),
        "the audience is intact"
    );
    status
}

#[actix_web::test]
async fn a_provider_calling_every_device_gone_deletes_no_registration_and_is_stopped_early() {
    const BREAKER: u64 = 20;
    let cluster = Cluster::start(options(
        &[],
        &["--batch-size=10"],
        &[&format!("--dispatch-breaker-pushes={BREAKER}")],
    ))
    .await;
    let all = alternating_devices(400, &["t"]);
    seed_devices(&cluster.sql().await, &all).await.unwrap();
    // APNs answers 410 Unregistered, in Apple's own words, to every push.
    cluster.mocks().state(Platform::Ios).faults.set(FaultConfig {
        dead_prefixes: vec![String::new()],
        ..FaultConfig::default()
    });
    let status = sends_and_keeps_everyone(&cluster, &all, json!(["ios/production"])).await;
    let ios = &status["delivery"]["ios"];
    let gone = ios["unregistered"].as_u64().unwrap_or(0);
    let held_back = ios["held_back"].as_u64().unwrap_or(0);
    assert_eq!(gone + held_back, 200, "{status}");
    // The breaker judges after its first 20; batches already in flight
    // then (2 workers of 10) still go out.
    let pushed = cluster
        .mocks()
        .state(Platform::Ios)
        .accounting
        .stats()
        .by_status
        .get(&410)
        .copied();
    assert_eq!(pushed, Some(gone));
    assert!(
        (BREAKER..=BREAKER + 60).contains(&gone),
        "the rest was held back: {gone} pushed"
    );
    assert_eq!(
        status["delivery"]["android"]["sent"], 200,
        "the other segment is untouched"
    );
    assert_eq!(status["delivery"]["android"]["held_back"], 0);
    cluster.stop().await;
}

#[actix_web::test]
async fn a_small_wholly_misconfigured_segment_keeps_its_registrations() {
    let cluster = Cluster::start(options(&[], &[], &[])).await;
    // 960 Android devices and 40 iOS ones, and the iOS dispatcher has the
    // wrong bundle id: every iOS push is DeviceTokenNotForTopic. 40 of
    // 1,000 is under 5% of the audience, but all of its segment.
    let mut all: Vec<Device> = (0..960).map(|n| Device::android(n, &["t"])).collect();
    all.extend((1_000..1_040).map(|n| Device::ios(n, &["t"])));
    seed_devices(&cluster.sql().await, &all).await.unwrap();
    cluster.mocks().state(Platform::Ios).faults.set(FaultConfig {
        foreign: tokens(&all, Platform::Ios),
        ..FaultConfig::default()
    });
    let status = sends_and_keeps_everyone(&cluster, &all, json!(["ios/production"])).await;
    assert_eq!(status["delivery"]["ios"]["invalid"], 40);
    assert_eq!(status["delivery"]["android"]["sent"], 960);
    cluster.stop().await;
}

#[actix_web::test]
async fn endpoints_that_are_not_apns_or_fcm_delete_no_registration() {
    let cluster = Cluster::start(options(&[], &[], &[])).await;
    let all = alternating_devices(100, &["t"]);
    seed_devices(&cluster.sql().await, &all).await.unwrap();
    // Both endpoints point at a web server that is not the provider: every
    // push gets an HTML page, 410 "Gone" from the one, 404 from the other.
    for (platform, status) in [(Platform::Ios, 410), (Platform::Android, 404)] {
        cluster.mocks().state(platform).faults.set(FaultConfig {
            impostor_status: Some(status),
            ..FaultConfig::default()
        });
    }
    let id = send(&cluster, json!({"topics": ["t"], "body": "misrouted"})).await;
    let status = cluster.wait_until_settled(&id, WAIT).await;
    for platform in ["ios", "android"] {
        let delivery = &status["delivery"][platform];
        assert_eq!(delivery["failed"], 50, "every push failed: {status}");
        assert_eq!(delivery["unregistered"], 0, "no token is called gone: {status}");
        assert_eq!(delivery["invalid"], 0, "no token is called invalid: {status}");
    }
    assert_eq!(status["cleanup"]["registrations_deleted"], 0, "{status}");
    assert_eq!(status["ninety_in_two"], false, "{status}");
    let everyone: Vec<String> = all.iter().map(|d| d.token.clone()).collect();
    assert_eq!(
        registered(&cluster, &everyone).await.len(),
        100,
        "the audience is intact"
    );
    cluster.stop().await;
}

#[actix_web::test]
async fn an_outage_longer_than_the_attempts_loses_no_device() {
    let cluster = Cluster::start(options(&[], &[], &["--dispatch-max-attempts=2"])).await;
    let all = alternating_devices(100, &["t"]);
    seed_devices(&cluster.sql().await, &all).await.unwrap();
    let storm = FaultConfig {
        error_rates: [(503, 1.0)].into(),
        retry_after_s: Some(0),
        ..FaultConfig::default()
    };
    for platform in platforms_of(&all) {
        cluster.mocks().state(platform).faults.set(storm.clone());
    }
    let id = send(&cluster, json!({"topics": ["t"], "body": "storm"})).await;
    // Every push has had its 2 attempts, and then some: the storm outlasts
    // the attempts.
    let refused = |platform| {
        let stats = cluster.mocks().state(platform).accounting.stats();
        stats.by_status.get(&503).copied().unwrap_or(0)
    };
    let deadline = Instant::now() + WAIT;
    while platforms_of(&all).iter().any(|p| refused(*p) < 150) {
        assert!(Instant::now() < deadline, "the storm never got going");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for platform in platforms_of(&all) {
        cluster.mocks().state(platform).faults.set(FaultConfig::default());
    }
    let status = cluster.wait_until_settled(&id, WAIT).await;
    for platform in platforms_of(&all) {
        let stats = cluster.mocks().state(platform).accounting.stats();
        assert_eq!(
            stats.unique_tokens, 50,
            "{platform}: everyone got it after the storm"
        );
        assert_eq!(status["delivery"][platform.as_str()]["failed"], 0, "{status}");
    }
    assert_eq!(status["status"], "complete");
    cluster.stop().await;
}

#[actix_web::test]
async fn outages_and_throttling_are_retried_until_delivered() {
    let cluster = Cluster::start(options(
        &[],
        &["--batch-size=25"],
        &["--dispatch-max-attempts=12"],
    ))
    .await;
    let all = alternating_devices(200, &["t"]);
    seed_devices(&cluster.sql().await, &all).await.unwrap();
    for platform in platforms_of(&all) {
        cluster.mocks().state(platform).faults.set(FaultConfig {
            error_rates: [(503, 0.25), (429, 0.1), (500, 0.05)].into(),
            retry_after_s: Some(0),
            ..FaultConfig::default()
        });
    }
    let id = send(&cluster, json!({"topics": ["t"], "body": "persistent"})).await;
    let status = cluster.wait_until_settled(&id, WAIT).await;
    for platform in platforms_of(&all) {
        let stats = cluster.mocks().state(platform).accounting.stats();
        assert_eq!(stats.unique_tokens, 100, "{platform}: everyone got it in the end");
        assert_eq!(stats.duplicate_pushes, 0);
        let refused: u64 = [429, 500, 503]
            .iter()
            .filter_map(|s| stats.by_status.get(s))
            .sum();
        assert!(
            refused > 10,
            "{platform}: the faults were hit ({:?})",
            stats.by_status
        );
        assert_eq!(status["delivery"][platform.as_str()]["sent"], 100);
        assert_eq!(status["delivery"][platform.as_str()]["failed"], 0);
    }
    cluster.stop().await;
}

/// Sends to 20 Android devices while FCM answers every push 429 with
/// `Retry-After: retry_after_s`, lets FCM recover once it has refused a
/// push, and returns the settled status and how long the send took.
async fn send_through_429s(retry_after_s: u64, dispatcher: &[&str]) -> (Value, Duration) {
    let cluster = Cluster::start(options(&[], &[], dispatcher)).await;
    let all: Vec<Device> = (0..20).map(|n| Device::android(n, &["t"])).collect();
    seed_devices(&cluster.sql().await, &all).await.unwrap();
    let fcm = &cluster.mocks().state(Platform::Android).faults;
    fcm.set(FaultConfig {
        error_rates: [(429, 1.0)].into(),
        retry_after_s: Some(retry_after_s),
        ..FaultConfig::default()
    });
    let started = Instant::now();
    let id = send(&cluster, json!({"topics": ["t"], "body": "patience"})).await;
    let deadline = Instant::now() + WAIT;
    while !cluster
        .mocks()
        .state(Platform::Android)
        .accounting
        .stats()
        .by_status
        .contains_key(&429)
    {
        assert!(Instant::now() < deadline, "FCM was never asked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fcm.set(FaultConfig::default());
    let status = cluster.wait_until_settled(&id, WAIT).await;
    let took = started.elapsed();
    cluster.stop().await;
    (status, took)
}

#[actix_web::test]
async fn retry_after_is_honoured() {
    let (status, took) = send_through_429s(2, &[]).await;
    assert_eq!(status["delivery"]["android"]["sent"], 20, "{status}");
    assert!(took >= Duration::from_secs(2), "the retry waited for Retry-After");
}

#[actix_web::test]
async fn a_retry_after_of_any_size_is_capped_and_panics_nothing() {
    // u64::MAX seconds: once a panic in the dispatch thread ("overflow when
    // adding durations") that failed the batch; now waited for 1 s at most.
    let (status, took) = send_through_429s(u64::MAX, &["--dispatch-retry-after-max-secs=1"]).await;
    assert_eq!(status["delivery"]["android"]["sent"], 20, "{status}");
    assert_eq!(status["delivery"]["android"]["failed"], 0, "{status}");
    assert!(took < WAIT, "the send went on after the capped wait ({took:?})");
}

#[actix_web::test]
async fn an_expired_notification_is_not_sent_and_a_dry_run_sends_nothing() {
    let cluster = Cluster::start(options(&[], &[], &[])).await;
    seed_devices(&cluster.sql().await, &alternating_devices(40, &["t"]))
        .await
        .unwrap();

    let expired = send(
        &cluster,
        json!({"topics": ["t"], "body": "old news", "ttl_seconds": 0}),
    )
    .await;
    let status = cluster.wait_until_settled(&expired, WAIT).await;
    assert_eq!(status["status"], "complete");
    assert_eq!(status["delivery"]["ios"]["expired"], 20);
    assert_eq!(status["delivery"]["android"]["expired"], 20);

    let dry = send(
        &cluster,
        json!({"topics": ["t"], "body": "rehearsal", "dry_run": true}),
    )
    .await;
    let status = cluster.wait_until_settled(&dry, WAIT).await;
    assert_eq!(status["status"], "complete");
    assert_eq!(status["dry_run"], true);
    assert_eq!(status["delivery"]["ios"]["dry_run"], 20);
    assert_eq!(status["delivery"]["android"]["dry_run"], 20);

    for platform in Platform::ALL {
        assert_eq!(
            cluster.mocks().state(platform).accounting.stats().by_status.len(),
            0,
            "{platform}: nothing reached the provider"
        );
    }
    cluster.stop().await;
}

#[actix_web::test]
async fn a_dispatcher_killed_mid_batch_loses_nothing_and_resends_only_its_batch() {
    const DEVICES: u64 = 3000;
    const BATCH: u64 = 500;
    let mut cluster = Cluster::start(options(
        &[],
        &[&format!("--batch-size={BATCH}")],
        &[
            "--dispatch-batch-workers=1",
            "--dispatch-prefetch=1",
            "--dispatch-streams-per-batch=10",
        ],
    ))
    .await;
    let all: Vec<Device> = (0..DEVICES).map(|n| Device::ios(n, &["t"])).collect();
    seed_devices(&cluster.sql().await, &all).await.unwrap();
    let apns = &cluster.mocks().state(Platform::Ios);
    apns.faults.set(FaultConfig {
        // Slow enough (a batch takes 5 s) that the kill lands mid-batch even
        // when a busy machine starves this test for seconds.
        latency_ms: 100.0,
        ..FaultConfig::default()
    });

    let id = send(&cluster, json!({"topics": ["t"], "body": "survives"})).await;
    let deadline = Instant::now() + WAIT;
    while cluster.mocks().state(Platform::Ios).accounting.stats().accepted < BATCH + 100 {
        assert!(Instant::now() < deadline, "the dispatcher never got going");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Dispatchers start in `Platform::ALL` order: iOS first.
    cluster.dispatchers[0].kill();
    cluster
        .start_dispatcher(Platform::Ios, &["--dispatch-streams-per-batch=500"])
        .await;

    let status = cluster.wait_until_settled(&id, WAIT).await;
    let stats = cluster.mocks().state(Platform::Ios).accounting.stats();
    assert_eq!(stats.unique_tokens, DEVICES, "every device still gets its push");
    assert!(stats.duplicate_pushes > 0, "the batch in flight was sent again");
    assert!(
        stats.duplicate_pushes < BATCH,
        "only the batch in flight: {} repeats",
        stats.duplicate_pushes
    );
    assert_eq!(
        status["delivery"]["ios"]["sent"], DEVICES,
        "each batch is counted once"
    );
    cluster.stop().await;
}

#[actix_web::test]
async fn a_cancel_in_the_middle_of_a_large_send_stops_it() {
    const DEVICES: u64 = 20_000;
    let cluster = Cluster::start(options(
        &[],
        &["--batch-size=200"],
        &["--dispatch-batch-workers=2", "--dispatch-streams-per-batch=20"],
    ))
    .await;
    let all: Vec<Device> = (0..DEVICES).map(|n| Device::android(n, &["t"])).collect();
    seed_devices(&cluster.sql().await, &all).await.unwrap();
    let fcm = cluster.mocks().state(Platform::Android);
    fcm.faults.set(FaultConfig {
        latency_ms: 20.0,
        ..FaultConfig::default()
    });

    let id = send(&cluster, json!({"topics": ["t"], "body": "wrong alert"})).await;
    let deadline = Instant::now() + WAIT;
    while fcm.accounting.stats().accepted < 300 {
        assert!(Instant::now() < deadline, "the dispatcher never got going");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let response = cluster
        .http
        .post(format!("{}/api/v1/notifications/{id}/cancel", cluster.base))
        .bearer_auth(clarion_load_tests::testkit::DESK_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "cancelled");

    let status = cluster.wait_until_settled(&id, WAIT).await;
    assert_eq!(status["status"], "cancelled", "{status}");
    let accepted = fcm.accounting.stats().accepted;
    assert!(
        accepted < DEVICES / 4,
        "far fewer pushes than the audience: {accepted}"
    );
    assert!(
        status["delivery"]["android"]["cancelled"].as_u64().unwrap_or(0) > 0,
        "{status}"
    );
    assert_eq!(
        status["delivery"]["android"]["sent"], accepted,
        "what was accepted counts as sent"
    );
    cluster.stop().await;
}

#[actix_web::test]
async fn a_rate_cap_holds_the_push_rate_near_its_value() {
    const CAP: u64 = 400;
    const DEVICES: u64 = 1200;
    let cluster = Cluster::start(options(&[], &[], &[&format!("--dispatch-rate-limit={CAP}")])).await;
    let all: Vec<Device> = (0..DEVICES).map(|n| Device::android(n, &["t"])).collect();
    seed_devices(&cluster.sql().await, &all).await.unwrap();
    let id = send(&cluster, json!({"topics": ["t"], "body": "paced"})).await;
    cluster.wait_until_settled(&id, WAIT).await;
    let stats = cluster.mocks().state(Platform::Android).accounting.stats();
    assert_eq!(stats.accepted, DEVICES);
    let (first, last) = (
        stats.first_accept_unix_ms.unwrap(),
        stats.last_accept_unix_ms.unwrap(),
    );
    let rate = (DEVICES - 1) as f64 * 1000.0 / (last - first).max(1) as f64;
    assert!(
        rate <= CAP as f64 * 1.15,
        "{rate:.0} pushes/s over a cap of {CAP}"
    );
    assert!(
        rate >= CAP as f64 * 0.5,
        "{rate:.0} pushes/s, far under a cap of {CAP}"
    );
    cluster.stop().await;
}
