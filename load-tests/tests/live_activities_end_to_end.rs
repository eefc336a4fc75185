//! Live Activities end to end (issue 38): the whole cluster in one process
//! — the coordinator, a harvester and the real iOS dispatcher — against the
//! mock APNs. Create → a channel per APNs environment created at the mock
//! → start pushes to exactly the push-to-start tokens of the activity's
//! type and topics → each update broadcast once per channel (in timestamp order),
//! a replayed update id broadcast once → end → 409 → `DELETE` removes the
//! channels at the mock; and a channel that outlives a coordinator restart
//! still carries the updates sent after it — a graceful one in process, and
//! a kill -9 while broadcasts are in flight with the services as real
//! processes (the binaries `cargo build --workspace --bins` puts beside
//! this test; `./scripts/test` builds them first).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use clarion_load_tests::local_cluster::{self, LocalCluster, LocalClusterConfig, Member};
use clarion_load_tests::mocks::digest;
use clarion_load_tests::testkit::{Cluster, ClusterOptions, Mocks};
use clarion_runtime::testing::{TestDatabase, TestNamespace};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(90);
const TOPIC: &str = "sport/football";
const BUNDLE_LIVE_ACTIVITY_SUFFIX: &str = ".push-type.liveactivity";

fn options() -> ClusterOptions {
    ClusterOptions {
        harvesters: 1,
        dispatchers: true,
        ..ClusterOptions::default()
    }
}

/// APNs token `n` of `group` (64 hex digits).
fn token(group: u8, n: u64) -> String {
    format!("{group:02x}{:062x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
}

fn tokens(group: u8, count: u64) -> Vec<String> {
    (0..count).map(|n| token(group, n)).collect()
}

fn match_activity() -> Value {
    json!({"name": "England v France", "attributes_type": "MatchAttributes",
           "attributes": {"home": "England", "away": "France"},
           "content_state": {"home": 0, "away": 0, "minute": 0}, "topics": [TOPIC],
           "storage_policy": "most-recent",
           "alert": {"title": "Kick-off", "body": "England v France"}})
}

fn score(home: u32, away: u32, minute: u32) -> Value {
    json!({"home": home, "away": away, "minute": minute})
}

async fn create(cluster: &Cluster) -> String {
    let (status, created) = cluster
        .desk(Method::POST, "/api/v1/live-activities", Some(&match_activity()))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created["id"].as_str().expect("an id").to_owned()
}

/// Posts an update (or the end); returns the answer's status and id.
async fn update(cluster: &Cluster, activity: &str, body: &Value) -> (StatusCode, Value) {
    cluster
        .desk(
            Method::POST,
            &format!("/api/v1/live-activities/{activity}/updates"),
            Some(body),
        )
        .await
}

/// The activity's channels by environment, once every one has its id.
fn channel_ids(activity: &Value) -> Option<HashMap<String, String>> {
    let channels = activity["channels"].as_array()?;
    channels
        .iter()
        .map(|c| {
            Some((
                c["environment"].as_str()?.to_owned(),
                c["channel_id"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Waits until every channel of `cluster`'s mock APNs named in `channels`
/// recorded `count` updates; returns them by channel.
async fn wait_for_broadcasts(cluster: &Cluster, channels: &[&String], count: usize) -> Vec<Vec<Value>> {
    let mock = &cluster.mocks().apns.channels;
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let recorded: Vec<Vec<Value>> = channels
            .iter()
            .map(|id| mock.updates(id).unwrap_or_default())
            .collect();
        if recorded.iter().all(|updates| updates.len() >= count) {
            return recorded;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{count} broadcasts per channel not within {WAIT:?}: {recorded:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Events and content states as a phone applies them: by `timestamp` (two
/// channel workers may deliver a channel's broadcasts out of order; the
/// timestamps put them back).
fn received(updates: &[Value]) -> Vec<(String, Value)> {
    let mut by_time = updates.to_vec();
    by_time.sort_by_key(|u| u["aps"]["timestamp"].as_i64().unwrap_or(0));
    received_in_arrival_order(&by_time)
}

/// Events and content states as the mock recorded them.
fn received_in_arrival_order(updates: &[Value]) -> Vec<(String, Value)> {
    updates
        .iter()
        .map(|u| {
            (
                u["aps"]["event"].as_str().unwrap_or_default().to_owned(),
                u["aps"]["content-state"].clone(),
            )
        })
        .collect()
}

/// Whether no two of a channel's broadcasts share a timestamp (a copy of
/// one would).
fn distinct_timestamps(updates: &[Value]) -> bool {
    let stamps: BTreeSet<i64> = updates
        .iter()
        .map(|u| u["aps"]["timestamp"].as_i64().unwrap_or(0))
        .collect();
    stamps.len() == updates.len()
}

#[actix_web::test]
async fn an_activity_starts_on_its_push_to_start_tokens_and_updates_each_channel_once() {
    let cluster = Cluster::start(options()).await;
    let production = tokens(1, 6);
    let sandbox = tokens(2, 3);
    let other_type = tokens(3, 4);
    let other_topic = tokens(4, 2);
    let devices = tokens(5, 5);
    for t in &production {
        cluster
            .register_push_to_start(t, "MatchAttributes", "production", &[TOPIC])
            .await;
    }
    for t in &sandbox {
        cluster
            .register_push_to_start(t, "MatchAttributes", "sandbox", &[TOPIC])
            .await;
    }
    for t in &other_type {
        cluster
            .register_push_to_start(t, "ElectionAttributes", "production", &[TOPIC])
            .await;
    }
    for t in &other_topic {
        cluster
            .register_push_to_start(t, "MatchAttributes", "production", &["weather/london"])
            .await;
    }
    for t in &devices {
        let response = cluster
            .http
            .put(format!("{}/api/v1/registrations/{t}", cluster.base))
            .bearer_auth(clarion_load_tests::testkit::APP_KEY)
            .json(&json!({"platform": "ios", "topics": [TOPIC]}))
            .send()
            .await
            .expect("registration answered");
        assert_eq!(response.status(), StatusCode::OK);
    }
    let apns = &cluster.mocks().apns;
    apns.state.set_keeping(true);

    // Create: one channel per environment, created at the mock.
    let id = create(&cluster).await;
    let expected: Vec<&String> = production.iter().chain(&sandbox).collect();
    let activity = cluster
        .wait_for_activity(&id, WAIT, |a| {
            channel_ids(a).is_some() && a["start"]["accepted"].as_u64() == Some(expected.len() as u64)
        })
        .await;
    let channels = channel_ids(&activity).expect("channel ids");
    assert_eq!(channels.len(), 2, "{activity}");
    let at_mock: BTreeSet<String> = apns.channels.channel_ids().into_iter().collect();
    for channel in channels.values() {
        assert!(
            at_mock.contains(channel),
            "{channel} not at the mock: {at_mock:?}"
        );
        assert_eq!(apns.channels.storage_policy(channel), Some(1), "most-recent");
    }
    assert_eq!(at_mock.len(), 2, "{at_mock:?}");

    // Start pushes: exactly the MatchAttributes tokens on the topic, once each.
    let notification = activity["start"]["notification_id"]
        .as_str()
        .expect("a start notification");
    let settled = cluster.wait_until_settled(notification, WAIT).await;
    assert_eq!(settled["status"], "complete", "{settled}");
    let stats = apns.state.accounting.stats();
    assert_eq!(stats.unique_tokens as usize, expected.len(), "{stats:?}");
    assert_eq!(stats.duplicate_pushes, 0, "{stats:?}");
    assert_eq!(
        stats.digest,
        digest(expected.iter().map(|t| t.as_str())),
        "no device token, no other type, no other topic"
    );
    let starts = apns.state.received();
    assert_eq!(starts.len(), expected.len());
    for push in &starts {
        assert_eq!(push.header("apns-push-type"), Some("liveactivity"));
        assert!(
            push.header("apns-topic")
                .unwrap_or_default()
                .ends_with(BUNDLE_LIVE_ACTIVITY_SUFFIX),
            "{:?}",
            push.header("apns-topic")
        );
        let body = push.json();
        assert_eq!(body["aps"]["event"], "start");
        assert_eq!(body["aps"]["attributes-type"], "MatchAttributes");
        let environment = if sandbox.contains(&push.token) {
            "sandbox"
        } else {
            "production"
        };
        assert_eq!(body["aps"]["input-push-channel"], channels[environment], "{body}");
    }
    let lost = expected.len() - stats.unique_tokens as usize;
    println!(
        "start: {} push-to-start tokens of the type on the topic, delivered {}, duplicates {}, lost {lost}; \
         {} other-type, {} other-topic and {} device tokens reached 0",
        expected.len(),
        stats.unique_tokens,
        stats.duplicate_pushes,
        other_type.len(),
        other_topic.len(),
        devices.len()
    );

    // Three updates, the second sent twice, then the end.
    let scores = [score(1, 0, 23), score(1, 1, 51), score(2, 1, 88)];
    let mut sent = Vec::new();
    for state in &scores {
        let body = json!({"id": Uuid::new_v4(), "content_state": state});
        let (status, answer) = update(&cluster, &id, &body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
        assert_eq!(answer["id"], body["id"]);
        sent.push(body);
    }
    let (status, answer) = update(&cluster, &id, &sent[1]).await;
    assert_eq!(status, StatusCode::OK, "a replay: {answer}");
    assert_eq!(answer["id"], sent[1]["id"]);
    let final_state = score(2, 1, 90);
    let end = json!({"id": Uuid::new_v4(), "event": "end", "content_state": final_state});
    let (status, answer) = update(&cluster, &id, &end).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let (status, answer) = update(&cluster, &id, &json!({"content_state": score(3, 1, 95)})).await;
    assert_eq!(status, StatusCode::CONFLICT, "after the end: {answer}");

    let ids: Vec<&String> = channels.values().collect();
    let recorded = wait_for_broadcasts(&cluster, &ids, 4).await;
    // Anything still in flight would show now.
    let activity = cluster
        .wait_for_activity(&id, WAIT, |a| {
            a["updates"].as_array().is_some_and(|updates| {
                updates.len() == 4
                    && updates.iter().all(|u| {
                        u["broadcasts"]
                            .as_array()
                            .is_some_and(|b| b.len() == 2 && b.iter().all(|b| b["outcome"] == "sent"))
                    })
            })
        })
        .await;
    assert_eq!(activity["status"], "ended", "{activity}");
    let expected_events: Vec<(String, Value)> = scores
        .iter()
        .map(|s| ("update".to_owned(), s.clone()))
        .chain([("end".to_owned(), final_state.clone())])
        .collect();
    let mut broadcasts = 0;
    for (channel, updates) in ids.iter().zip(&recorded) {
        let updates = apns.channels.updates(channel).unwrap_or_else(|| updates.clone());
        assert_eq!(received(&updates), expected_events, "channel {channel}");
        assert!(distinct_timestamps(&updates), "{updates:?}");
        broadcasts += updates.len();
    }
    println!(
        "updates: 3 updates and the end (one update id sent twice) on 2 channels: {broadcasts} broadcasts \
         recorded at the mock (expected 8), duplicates {}, lost {}",
        broadcasts.saturating_sub(8),
        8usize.saturating_sub(broadcasts)
    );
    assert_eq!(broadcasts, 8);

    // DELETE: the channels go at the mock.
    let (status, answer) = cluster
        .desk(Method::DELETE, &format!("/api/v1/live-activities/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let activity = cluster
        .wait_for_activity(&id, WAIT, |a| {
            a["channels"]
                .as_array()
                .is_some_and(|c| c.iter().all(|c| c["state"] == "deleted"))
        })
        .await;
    assert_eq!(activity["status"], "deleted", "{activity}");
    let deleted = apns.channels.deleted();
    for channel in &ids {
        assert!(deleted.contains(channel), "{channel} not deleted: {deleted:?}");
        assert_eq!(apns.channels.updates(channel), None);
    }
    assert!(apns.channels.channel_ids().is_empty());
    println!("delete: {} channels deleted at the mock", deleted.len());
    cluster.stop().await;
}

#[actix_web::test]
async fn a_channel_outlives_a_coordinator_restart() {
    let mut cluster = Cluster::start(options()).await;
    let starters = tokens(1, 3);
    for t in &starters {
        cluster
            .register_push_to_start(t, "MatchAttributes", "production", &[TOPIC])
            .await;
    }
    let id = create(&cluster).await;
    let activity = cluster
        .wait_for_activity(&id, WAIT, |a| {
            channel_ids(a).is_some() && a["start"]["accepted"].as_u64() == Some(starters.len() as u64)
        })
        .await;
    let channel = channel_ids(&activity).expect("channel ids")["production"].clone();
    let first = json!({"id": Uuid::new_v4(), "content_state": score(1, 0, 23)});
    let (status, answer) = update(&cluster, &id, &first).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    wait_for_broadcasts(&cluster, &[&channel], 1).await;

    cluster.restart_coordinator().await;

    let activity = cluster.wait_for_activity(&id, WAIT, |_| true).await;
    assert_eq!(activity["status"], "live", "{activity}");
    assert_eq!(
        channel_ids(&activity).expect("channel ids")["production"],
        channel
    );
    let (status, answer) = update(&cluster, &id, &first).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the same update after the restart is a replay: {answer}"
    );
    let second = json!({"id": Uuid::new_v4(), "content_state": score(1, 1, 51)});
    let (status, answer) = update(&cluster, &id, &second).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let end = json!({"id": Uuid::new_v4(), "event": "end", "content_state": score(1, 1, 90)});
    let (status, answer) = update(&cluster, &id, &end).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let recorded = wait_for_broadcasts(&cluster, &[&channel], 3).await;
    cluster
        .wait_for_activity(&id, WAIT, |a| {
            a["updates"]
                .as_array()
                .is_some_and(|u| u.len() == 3 && u.iter().all(|u| u["broadcasts"][0]["outcome"] == "sent"))
        })
        .await;
    let updates = cluster
        .mocks()
        .apns
        .channels
        .updates(&channel)
        .unwrap_or_else(|| recorded[0].clone());
    assert_eq!(
        received(&updates),
        vec![
            ("update".to_owned(), score(1, 0, 23)),
            ("update".to_owned(), score(1, 1, 51)),
            ("end".to_owned(), score(1, 1, 90)),
        ]
    );
    assert!(distinct_timestamps(&updates), "{updates:?}");
    assert_eq!(
        cluster.mocks().apns.channels.channel_ids(),
        vec![channel.clone()],
        "no second channel"
    );
    let stats = cluster.mocks().apns.state.accounting.stats();
    assert_eq!(stats.unique_tokens as usize, starters.len());
    assert_eq!(stats.duplicate_pushes, 0);
    println!(
        "restart: channel {channel} kept; 3 broadcasts recorded (1 before the restart, 2 after; a replay \
         across it answered 200), duplicates 0, lost 0; start pushes delivered {} of {}, duplicates 0",
        stats.unique_tokens,
        starters.len()
    );
    cluster.stop().await;
}

/// `method` on `path` of a cluster of processes with `key`: the status and
/// the JSON answer (null when none).
async fn call(
    cluster: &LocalCluster,
    key: &str,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> (StatusCode, Value) {
    let mut request = cluster
        .http
        .request(method, format!("{}{path}", cluster.base))
        .bearer_auth(key)
        .timeout(Duration::from_secs(30));
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.expect("answered");
    let status = response.status();
    (status, response.json().await.unwrap_or_default())
}

/// Polls the activity on a cluster of processes until `done` holds.
async fn wait_on_processes(cluster: &LocalCluster, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let (_, activity) = call(
            cluster,
            local_cluster::DESK_KEY,
            Method::GET,
            &format!("/api/v1/live-activities/{id}"),
            None,
        )
        .await;
        if done(&activity) {
            return activity;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "activity not there within {WAIT:?}: {activity}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_while_broadcasting_keeps_the_channel_and_every_update() {
    const STARTERS: u64 = 4;
    const BEFORE_KILL: usize = 5;
    let db = TestDatabase::create().await;
    let namespace = TestNamespace::new();
    let mocks = Mocks::start().await;
    let logs = std::env::temp_dir().join(format!("clarion-la-crash-{}", namespace.settings.namespace));
    let config = LocalClusterConfig {
        database_url: db.url.clone(),
        amqp_url: namespace.settings.url.clone(),
        namespace: namespace.settings.namespace.clone(),
        harvesters: 1,
        coordinator_env: Vec::new(),
        harvester_env: Vec::new(),
        dispatcher_env: mocks.dispatcher_env(),
        log_dir: logs.clone(),
    };
    let mut cluster = LocalCluster::start(&config).await.expect("the cluster starts");
    let starters = tokens(1, STARTERS);
    for t in &starters {
        let body = json!({"platform": "ios", "kind": "push_to_start", "attributes_type": "MatchAttributes",
                          "topics": [TOPIC]});
        let (status, answer) = call(
            &cluster,
            local_cluster::APP_KEY,
            Method::PUT,
            &format!("/api/v1/registrations/{t}"),
            Some(&body),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
    let (status, created) = call(
        &cluster,
        local_cluster::DESK_KEY,
        Method::POST,
        "/api/v1/live-activities",
        Some(&match_activity()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().expect("an id").to_owned();
    let activity = wait_on_processes(&cluster, &id, |a| {
        channel_ids(a).is_some() && a["start"]["accepted"].as_u64() == Some(STARTERS)
    })
    .await;
    let channel = channel_ids(&activity).expect("channel ids")["production"].clone();

    // A slow Apple keeps broadcasts in flight at the kill.
    mocks.apns.channels.set_latency(Duration::from_millis(200));
    let mut states = Vec::new();
    let mut first = Value::Null;
    for minute in 0..BEFORE_KILL as u32 {
        let state = score(minute, 0, 10 + minute);
        let body = json!({"id": Uuid::new_v4(), "content_state": state});
        let (status, answer) = call(
            &cluster,
            local_cluster::DESK_KEY,
            Method::POST,
            &format!("/api/v1/live-activities/{id}/updates"),
            Some(&body),
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
        if first.is_null() {
            first = body;
        }
        states.push(("update".to_owned(), state));
    }
    // Killed once the first broadcasts reached Apple, the others in the
    // outbox, the queue or the dispatcher's hands.
    let deadline = std::time::Instant::now() + WAIT;
    let at_kill = loop {
        let recorded = mocks.apns.channels.updates(&channel).map_or(0, |u| u.len());
        if recorded >= 1 {
            break recorded;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no broadcast within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    cluster.coordinator.kill();
    cluster
        .restart(Member::Coordinator)
        .await
        .expect("the coordinator starts again");
    mocks.apns.channels.set_latency(Duration::ZERO);

    let updates_path = format!("/api/v1/live-activities/{id}/updates");
    let (status, answer) = call(
        &cluster,
        local_cluster::DESK_KEY,
        Method::POST,
        &updates_path,
        Some(&first),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "a replay across the kill: {answer}");
    let after = score(BEFORE_KILL as u32, 1, 80);
    let end = score(BEFORE_KILL as u32, 1, 90);
    for body in [
        json!({"id": Uuid::new_v4(), "content_state": after}),
        json!({"id": Uuid::new_v4(), "event": "end", "content_state": end}),
    ] {
        let (status, answer) = call(
            &cluster,
            local_cluster::DESK_KEY,
            Method::POST,
            &updates_path,
            Some(&body),
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    }
    states.push(("update".to_owned(), after));
    states.push(("end".to_owned(), end));

    let expected = states.len();
    wait_on_processes(&cluster, &id, |a| {
        a["updates"]
            .as_array()
            .is_some_and(|u| u.len() == expected && u.iter().all(|u| u["broadcasts"][0]["outcome"] == "sent"))
    })
    .await;
    let updates = mocks
        .apns
        .channels
        .updates(&channel)
        .expect("the channel is still open");
    let mut by_time: Vec<(i64, (String, Value))> = updates
        .iter()
        .map(|u| u["aps"]["timestamp"].as_i64().unwrap_or(0))
        .zip(received_in_arrival_order(&updates))
        .collect();
    by_time.sort_by_key(|(stamp, _)| *stamp);
    by_time.dedup_by_key(|(stamp, _)| *stamp);
    let distinct: Vec<(String, Value)> = by_time.into_iter().map(|(_, update)| update).collect();
    assert_eq!(distinct, states, "every update once, in timestamp order");
    let copies = updates.len() - distinct.len();
    assert!(
        copies <= BEFORE_KILL,
        "copies bounded to the broadcasts in flight: {copies}"
    );
    assert_eq!(
        mocks.apns.channels.channel_ids(),
        vec![channel.clone()],
        "no second channel"
    );
    let activity = wait_on_processes(&cluster, &id, |_| true).await;
    assert_eq!(
        channel_ids(&activity).expect("channel ids")["production"],
        channel
    );
    let stats = mocks.apns.state.accounting.stats();
    assert_eq!(stats.unique_tokens, STARTERS);
    assert_eq!(stats.duplicate_pushes, 0);
    println!(
        "kill -9: {at_kill} of {BEFORE_KILL} broadcasts at the mock when the coordinator was killed; channel \
         {channel} kept; {expected} updates delivered of {expected} (lost 0), {copies} copies of broadcasts \
         in flight (same timestamp, ignored by phones); start pushes delivered {} of {STARTERS}, duplicates {}",
        stats.unique_tokens, stats.duplicate_pushes
    );
    cluster.stop();
    let _ = std::fs::remove_dir_all(&logs);
}
