//! Live Activities end to end (issue 38), against the mock APNs: push-to-
//! start tokens registered beside device tokens never get an alert. The
//! coordinator's side of an activity (create, channels, start push,
//! updates, end, delete, the limit, a restart) with the test acting as the
//! iOS dispatcher on `deliver.ios.channels`.

use std::time::Duration;

use clarion_load_tests::mocks::digest;
use clarion_load_tests::testkit::{APP_KEY, Cluster, ClusterOptions};
use clarion_proto::live_activity::{ChannelAction, ChannelCommand, ChannelOutcome};
use clarion_proto::{ApnsEnvironment, Notification, Platform};
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

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

/// `method` on `path` with the desk's key (scope `send`).
async fn desk(
    cluster: &Cluster,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    cluster.desk(method, path, body.as_ref()).await
}

fn match_activity() -> Value {
    json!({"name": "England v France", "attributes_type": "MatchAttributes",
           "attributes": {"home": "England", "away": "France"},
           "content_state": {"home": 0, "away": 0}, "topics": ["sport/football"],
           "storage_policy": "most-recent", "stale_after_seconds": 7200,
           "alert": {"title": "Kick-off", "body": "England v France"}})
}

fn environment_of(command: &ChannelCommand) -> &'static str {
    match command.environment {
        ApnsEnvironment::Production => "production",
        ApnsEnvironment::Sandbox => "sandbox",
    }
}

/// Polls the activity until `done` holds.
async fn wait_for_activity(cluster: &Cluster, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    cluster.wait_for_activity(id, WAIT, done).await
}

#[actix_web::test]
async fn an_activity_is_created_started_updated_ended_and_deleted_through_its_channels() {
    let mut cluster = Cluster::start(ClusterOptions::default()).await;
    let base_body = json!({"platform": "ios", "kind": "push_to_start", "attributes_type": "MatchAttributes",
                           "topics": ["sport/football"]});
    register(&cluster, &token(2, 1), base_body.clone()).await;
    let mut sandbox = base_body.clone();
    sandbox["environment"] = json!("sandbox");
    register(&cluster, &token(2, 2), sandbox).await;

    // Every refusal names its field.
    for (field, change) in [
        ("content_state", json!({"content_state": [1, 2]})),
        ("attributes", json!({"attributes": "ENG"})),
        ("name", json!({"name": " "})),
        ("attributes_type", json!({"attributes_type": ""})),
        ("topic", json!({"topics": []})),
        ("app", json!({"app": "nope"})),
        ("lane", json!({"lane": "fast"})),
        (
            "content_state",
            json!({"content_state": {"text": "x".repeat(5000)}}),
        ),
    ] {
        let mut body = match_activity();
        for (key, value) in change.as_object().expect("an object") {
            body[key] = value.clone();
        }
        let (status, problem) = desk(
            &cluster,
            reqwest::Method::POST,
            "/api/v1/live-activities",
            Some(body),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {problem}");
        assert!(
            problem["detail"].as_str().unwrap_or_default().contains(field),
            "{field}: {problem}"
        );
    }

    // Create: a channel per environment among the push-to-start tokens.
    let (status, created) = desk(
        &cluster,
        reqwest::Method::POST,
        "/api/v1/live-activities",
        Some(match_activity()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().expect("an id").to_owned();
    let activity_id: Uuid = id.parse().expect("a uuid");
    let creates = cluster.take_channel_commands(2, WAIT).await;
    assert_eq!(creates.len(), 2, "{creates:?}");
    let mut environments: Vec<_> = creates.iter().map(environment_of).collect();
    environments.sort_unstable();
    assert_eq!(environments, ["production", "sandbox"]);
    assert!(
        creates
            .iter()
            .all(|c| c.activity_id == activity_id && matches!(c.action, ChannelAction::CreateChannel { .. }))
    );

    // An update before the channels exist waits for them.
    let first_update = Uuid::now_v7();
    let update = json!({"id": first_update, "content_state": {"home": 1, "away": 0}});
    let updates_path = format!("/api/v1/live-activities/{id}/updates");
    let (status, body) = desk(
        &cluster,
        reqwest::Method::POST,
        &updates_path,
        Some(update.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, body) = desk(&cluster, reqwest::Method::POST, &updates_path, Some(update)).await;
    assert_eq!(status, StatusCode::OK, "a replay: {body}");
    assert_eq!(body["id"], first_update.to_string());

    // Apple answers the creates (the sandbox one twice, with another id).
    let channel_of = |c: &ChannelCommand| format!("{}-channel", environment_of(c));
    for create in &creates {
        let channel_id = channel_of(create);
        cluster
            .report_channel_outcome(create, ChannelOutcome::Created { channel_id })
            .await;
    }
    let sandbox_create = creates
        .iter()
        .find(|c| environment_of(c) == "sandbox")
        .expect("sandbox");
    cluster
        .report_channel_outcome(
            sandbox_create,
            ChannelOutcome::Created {
                channel_id: "extra".into(),
            },
        )
        .await;
    let started = wait_for_activity(&cluster, &id, |a| !a["start"]["notification_id"].is_null()).await;
    assert_eq!(started["status"], "live", "{started}");
    let start_id = started["start"]["notification_id"]
        .as_str()
        .expect("a start")
        .to_owned();

    // The start push is an ordinary notification carrying both channels.
    let sql = cluster.sql().await;
    let row = sql
        .query_one(
            "SELECT payload, lane FROM notifications WHERE id = $1::text::uuid",
            &[&start_id],
        )
        .await
        .expect("the start notification");
    let notification: Notification = serde_json::from_value(row.get(0)).expect("a notification");
    let lane: String = row.get(1);
    let start = notification.live_activity.expect("a live activity start");
    println!(
        "start push {start_id}: lane {lane}, channels {:?} / {:?}",
        start.production_channel, start.sandbox_channel
    );
    assert_eq!(lane, "urgent");
    assert_eq!(start.activity_id, activity_id);
    assert_eq!(start.production_channel.as_deref(), Some("production-channel"));
    assert_eq!(start.sandbox_channel.as_deref(), Some("sandbox-channel"));
    assert_eq!(start.attributes_type, "MatchAttributes");
    assert_eq!(notification.title.as_deref(), Some("Kick-off"));

    // Released now: the waiting broadcasts (one per channel, once) and the
    // delete of the extra channel.
    let commands = cluster.take_channel_commands(3, WAIT).await;
    let broadcasts: Vec<_> = commands
        .iter()
        .filter_map(|c| match &c.action {
            ChannelAction::Broadcast {
                channel_id,
                update_id,
                payload,
                priority,
            } => Some((channel_id.clone(), *update_id, payload.clone(), *priority)),
            _ => None,
        })
        .collect();
    let deletes: Vec<_> = commands
        .iter()
        .filter_map(|c| match &c.action {
            ChannelAction::DeleteChannel { channel_id } => Some(channel_id.clone()),
            _ => None,
        })
        .collect();
    println!(
        "after the creates: {} broadcasts, deletes {deletes:?}",
        broadcasts.len()
    );
    assert_eq!(
        broadcasts.len(),
        2,
        "one broadcast per channel, the replay sent nothing: {commands:?}"
    );
    assert_eq!(deletes, ["extra"]);
    let mut channels: Vec<_> = broadcasts.iter().map(|b| b.0.as_str()).collect();
    channels.sort_unstable();
    assert_eq!(channels, ["production-channel", "sandbox-channel"]);
    assert!(broadcasts.iter().all(|b| b.1 == first_update && b.3 == 10));
    let first_timestamp = broadcasts[0].2["aps"]["timestamp"].as_i64().expect("a timestamp");
    assert_eq!(broadcasts[0].2["aps"]["event"], "update");
    assert!(first_timestamp > start.timestamp, "updates come after the start");
    for command in commands
        .iter()
        .filter(|c| matches!(c.action, ChannelAction::Broadcast { .. }))
    {
        cluster
            .report_channel_outcome(command, ChannelOutcome::Sent)
            .await;
    }

    // The channels and the activity survive a restart of the coordinator.
    cluster.restart_coordinator().await;
    let (status, body) = desk(
        &cluster,
        reqwest::Method::POST,
        &updates_path,
        Some(json!({"content_state": {"home": 2, "away": 0}, "alert": {"title": "Goal", "body": "2-0"}})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "after a restart: {body}");
    let commands = cluster.take_channel_commands(2, WAIT).await;
    assert_eq!(commands.len(), 2, "{commands:?}");
    for command in &commands {
        let ChannelAction::Broadcast { payload, .. } = &command.action else {
            panic!("a broadcast: {command:?}");
        };
        assert!(payload["aps"]["timestamp"].as_i64().expect("a timestamp") > first_timestamp);
        cluster
            .report_channel_outcome(command, ChannelOutcome::Sent)
            .await;
    }

    // 422s of an update name their field.
    for (field, body) in [
        ("content_state", json!({"content_state": 3})),
        ("event", json!({"content_state": {}, "event": "pause"})),
        ("priority", json!({"content_state": {}, "priority": 7})),
        (
            "dismissal_date",
            json!({"content_state": {}, "stale_date": 20, "dismissal_date": 10}),
        ),
    ] {
        let (status, problem) = desk(&cluster, reqwest::Method::POST, &updates_path, Some(body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {problem}");
        assert!(
            problem["detail"].as_str().unwrap_or_default().contains(field),
            "{field}: {problem}"
        );
    }

    // End, then no more updates.
    let (status, body) = desk(
        &cluster,
        reqwest::Method::POST,
        &updates_path,
        Some(json!({"content_state": {"home": 2, "away": 1}, "event": "end"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let ends = cluster.take_channel_commands(2, WAIT).await;
    assert!(
        ends.iter().all(|c| matches!(&c.action,
        ChannelAction::Broadcast { payload, .. } if payload["aps"]["event"] == "end")),
        "{ends:?}"
    );
    let (status, body) = desk(
        &cluster,
        reqwest::Method::POST,
        &updates_path,
        Some(json!({"content_state": {}})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let ended = wait_for_activity(&cluster, &id, |a| {
        a["updates"].as_array().is_some_and(|u| u.len() == 3)
            && a["updates"][1]["broadcasts"]
                .as_array()
                .is_some_and(|b| b.iter().all(|b| b["outcome"] == "sent"))
    })
    .await;
    assert_eq!(ended["status"], "ended", "{ended}");
    assert_eq!(
        ended["updates"][0]["broadcasts"].as_array().map(Vec::len),
        Some(2),
        "{ended}"
    );

    // Delete: a delete per open channel; their answers mark them deleted.
    let (status, body) = desk(
        &cluster,
        reqwest::Method::DELETE,
        &format!("/api/v1/live-activities/{id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let deletes = cluster.take_channel_commands(2, WAIT).await;
    assert!(
        deletes
            .iter()
            .all(|c| matches!(c.action, ChannelAction::DeleteChannel { .. })),
        "{deletes:?}"
    );
    for command in &deletes {
        cluster
            .report_channel_outcome(command, ChannelOutcome::Deleted)
            .await;
    }
    let deleted = wait_for_activity(&cluster, &id, |a| {
        a["channels"]
            .as_array()
            .is_some_and(|c| c.iter().all(|c| c["state"] == "deleted"))
    })
    .await;
    assert_eq!(deleted["status"], "deleted", "{deleted}");

    // Audited as sends are: the create, each update accepted (not the
    // replay), the delete.
    let audited: Vec<String> = sql
        .query(
            "SELECT detail FROM audit_log WHERE target = 'live-activity/' || $1 ORDER BY id",
            &[&id],
        )
        .await
        .expect("the audit log")
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect();
    assert_eq!(audited.len(), 5, "{audited:?}");
    assert_eq!(
        (audited[0].as_str(), audited[4].as_str()),
        ("created", "deleted"),
        "{audited:?}"
    );

    // A day after an activity ended, the sweep deletes its channels.
    let (status, created) = desk(
        &cluster,
        reqwest::Method::POST,
        "/api/v1/live-activities",
        Some(match_activity()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let swept_id = created["id"].as_str().expect("an id").to_owned();
    for create in cluster.take_channel_commands(2, WAIT).await {
        let channel_id = format!("swept-{}", environment_of(&create));
        cluster
            .report_channel_outcome(&create, ChannelOutcome::Created { channel_id })
            .await;
    }
    wait_for_activity(&cluster, &swept_id, |a| a["status"] == "live").await;
    let swept_updates = format!("/api/v1/live-activities/{swept_id}/updates");
    let end = json!({"content_state": {"home": 0, "away": 0}, "event": "end"});
    let (status, body) = desk(&cluster, reqwest::Method::POST, &swept_updates, Some(end)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        cluster.take_channel_commands(2, WAIT).await.len(),
        2,
        "the end's broadcasts"
    );
    sql.execute(
        "UPDATE live_activities SET ended_at = now() - interval '25 hours' WHERE id = $1::text::uuid",
        &[&swept_id],
    )
    .await
    .expect("ended a day ago");
    println!("sweep: ended a day ago");
    let pool = clarion_runtime::db::pool(
        &clarion_runtime::DatabaseSettings::new(cluster.db.url.clone()),
        &cluster.trust,
        "live-activity-sweep-test",
    )
    .expect("a pool");
    assert!(
        clarion_coordinator::live_activity::relay::sweep(&pool).await,
        "the sweep queued deletes"
    );
    assert!(
        !clarion_coordinator::live_activity::relay::sweep(&pool).await,
        "once"
    );
    println!("sweep: deletes queued");
    let sweeps = cluster.take_channel_commands(2, WAIT).await;
    let mut swept: Vec<_> = sweeps
        .iter()
        .filter_map(|c| match &c.action {
            ChannelAction::DeleteChannel { channel_id } => Some(channel_id.as_str()),
            _ => None,
        })
        .collect();
    swept.sort_unstable();
    assert_eq!(swept, ["swept-production", "swept-sandbox"], "{sweeps:?}");
    for command in &sweeps {
        cluster
            .report_channel_outcome(command, ChannelOutcome::Deleted)
            .await;
    }
    wait_for_activity(&cluster, &swept_id, |a| {
        a["channels"]
            .as_array()
            .is_some_and(|c| c.iter().all(|c| c["state"] == "deleted"))
    })
    .await;

    // Apple's 10,000 channels per app and environment: a 409 when full.
    sql.batch_execute(
        "INSERT INTO live_activities (id, name, attributes_type, request, topics, last_timestamp)
         SELECT gen_random_uuid(), 'filler', 'MatchAttributes', '{}', '{}', 0 FROM generate_series(1, 10000);
         INSERT INTO live_activity_channels (activity_id, environment, app, state)
         SELECT id, 'production', 'default', 'open' FROM live_activities WHERE name = 'filler';",
    )
    .await
    .expect("10,000 channels");
    let (status, problem) = desk(
        &cluster,
        reqwest::Method::POST,
        "/api/v1/live-activities",
        Some(match_activity()),
    )
    .await;
    println!("at the limit: {status} {}", problem["detail"]);
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert!(
        problem["detail"].as_str().unwrap_or_default().contains("10000"),
        "{problem}"
    );
    cluster.stop().await;
}

#[actix_web::test]
async fn a_refused_create_fails_its_channel_and_a_channel_created_after_a_delete_is_deleted() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    // No push-to-start token yet: a production channel only.
    let (status, created) = desk(
        &cluster,
        reqwest::Method::POST,
        "/api/v1/live-activities",
        Some(match_activity()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let refused_id = created["id"].as_str().expect("an id").to_owned();
    let creates = cluster.take_channel_commands(1, WAIT).await;
    assert_eq!(creates.len(), 1, "{creates:?}");
    assert_eq!(environment_of(&creates[0]), "production");
    let path = format!("/api/v1/live-activities/{refused_id}/updates");
    let (status, body) = desk(
        &cluster,
        reqwest::Method::POST,
        &path,
        Some(json!({"content_state": {"home": 1}})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let refusal = ChannelOutcome::Refused {
        status: 400,
        reason: "BadRequest".into(),
    };
    cluster.report_channel_outcome(&creates[0], refusal).await;
    let failed = wait_for_activity(&cluster, &refused_id, |a| a["channels"][0]["state"] == "failed").await;
    assert_eq!(failed["channels"][0]["reason"], "BadRequest", "{failed}");
    assert_eq!(
        failed["updates"][0]["broadcasts"][0]["outcome"], "failed",
        "{failed}"
    );
    assert!(
        failed["start"]["notification_id"].is_null(),
        "no channel, no start: {failed}"
    );

    // A broadcast refused as ChannelNotRegistered: the channel is gone.
    let (status, created) = desk(
        &cluster,
        reqwest::Method::POST,
        "/api/v1/live-activities",
        Some(match_activity()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let gone_id = created["id"].as_str().expect("an id").to_owned();
    let creates = cluster.take_channel_commands(1, WAIT).await;
    cluster
        .report_channel_outcome(
            &creates[0],
            ChannelOutcome::Created {
                channel_id: "gone".into(),
            },
        )
        .await;
    let path = format!("/api/v1/live-activities/{gone_id}/updates");
    let (status, body) = desk(
        &cluster,
        reqwest::Method::POST,
        &path,
        Some(json!({"content_state": {"home": 1}})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let broadcasts = cluster.take_channel_commands(1, WAIT).await;
    let gone = ChannelOutcome::Refused {
        status: 410,
        reason: "ChannelNotRegistered".into(),
    };
    cluster.report_channel_outcome(&broadcasts[0], gone).await;
    let gone = wait_for_activity(&cluster, &gone_id, |a| a["channels"][0]["state"] == "deleted").await;
    assert_eq!(
        gone["updates"][0]["broadcasts"][0]["reason"], "ChannelNotRegistered",
        "{gone}"
    );

    // Deleted while its channel was being created: deleted once created.
    let (status, created) = desk(
        &cluster,
        reqwest::Method::POST,
        "/api/v1/live-activities",
        Some(match_activity()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let deleted_id = created["id"].as_str().expect("an id").to_owned();
    let creates = cluster.take_channel_commands(1, WAIT).await;
    let (status, body) = desk(
        &cluster,
        reqwest::Method::DELETE,
        &format!("/api/v1/live-activities/{deleted_id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    cluster
        .report_channel_outcome(
            &creates[0],
            ChannelOutcome::Created {
                channel_id: "late".into(),
            },
        )
        .await;
    let deletes = cluster.take_channel_commands(1, WAIT).await;
    assert!(
        matches!(&deletes[..], [ChannelCommand { action: ChannelAction::DeleteChannel { channel_id }, .. }] if channel_id == "late"),
        "{deletes:?}"
    );
    let deleted = wait_for_activity(&cluster, &deleted_id, |a| a["channels"][0]["state"] == "deleting").await;
    assert_eq!(deleted["status"], "deleted", "{deleted}");
    assert!(
        deleted["start"]["notification_id"].is_null(),
        "a deleted activity starts nowhere: {deleted}"
    );
    // Deleted, never ended: an update is refused, and the answer says why.
    let (status, problem) = desk(
        &cluster,
        reqwest::Method::POST,
        &format!("/api/v1/live-activities/{deleted_id}/updates"),
        Some(json!({"content_state": {}})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("was deleted")),
        "{problem}"
    );
    cluster.stop().await;
}
