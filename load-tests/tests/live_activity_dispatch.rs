//! Live Activities on the side that talks to Apple (issue 38), over the
//! real RabbitMQ and PostgreSQL and the mock APNs: channel commands
//! published by hand to `deliver.ios.channels` are carried out by the iOS
//! dispatcher (create, broadcast, delete, Apple's refusals, busy answers
//! retried within the cap, a command redelivered after a crash) and
//! reported on the reports exchange; a start push's token batch reaches
//! push-to-start tokens as a `liveactivity` push; the harvest of a start
//! reads only push-to-start tokens of its attributes type.

use std::time::{Duration, Instant};

use chrono::Utc;
use clarion_load_tests::testkit::{Cluster, ClusterOptions};
use clarion_proto::codec::{decode, encode};
use clarion_proto::live_activity::{
    ChannelAction, ChannelCommand, ChannelOutcome, ChannelReport, LiveActivityStart, StoragePolicy,
    UpdateBody,
};
use clarion_proto::names::{headers, message_types, routing_keys};
use clarion_proto::{
    ApnsEnvironment, BatchId, DeliveryReport, JobReport, Notification, Platform, SHARD_SPACE, ShardJob,
    ShardRange, TokenBatch, WireMessage, WireVersion, shard_of,
};
use clarion_runtime::amqp::message::{header_text, properties};
use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);
/// The iOS dispatcher's place in `Cluster::dispatchers` (started in
/// `Platform::ALL` order).
const IOS: usize = 0;

fn options(dispatcher: &[&str]) -> ClusterOptions {
    ClusterOptions {
        dispatcher: dispatcher.iter().map(|arg| arg.to_string()).collect(),
        dispatchers: true,
        ..ClusterOptions::default()
    }
}

/// The test's own line to the broker: publishes by hand and taps the
/// reports exchange with queues of its own (the coordinator consumes the
/// reports queue).
struct Wire {
    _connection: Connection,
    channel: Channel,
}

impl Wire {
    async fn open(cluster: &Cluster) -> Self {
        let connection = clarion_runtime::amqp::connect::open(
            &cluster.broker.url,
            ConnectionProperties::default(),
            &cluster.trust,
        )
        .await
        .expect("test connection to RabbitMQ");
        let channel = connection.create_channel().await.expect("channel");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirms");
        Self {
            _connection: connection,
            channel,
        }
    }

    /// A queue of the test's that gets a copy of every message published
    /// to the reports exchange with `routing_key`.
    async fn tap(&self, cluster: &Cluster, routing_key: &str) -> String {
        let queue = format!("{}.test-tap.{routing_key}", cluster.broker.namespace);
        let declare = QueueDeclareOptions {
            exclusive: true,
            auto_delete: true,
            ..QueueDeclareOptions::default()
        };
        self.channel
            .queue_declare(queue.as_str().into(), declare, FieldTable::default())
            .await
            .expect("tap declared");
        self.channel
            .queue_bind(
                queue.as_str().into(),
                cluster.names.reports_exchange().as_str().into(),
                routing_key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("tap bound");
        queue
    }

    /// Publishes `message` where Clarion's own publishers would, confirmed.
    async fn publish<M: WireMessage>(&self, cluster: &Cluster, message: &M) {
        self.publish_raw(
            &M::exchange(&cluster.names),
            message.routing_key(),
            M::TYPE,
            &encode(message).expect("encodes"),
        )
        .await;
    }

    async fn publish_raw(&self, exchange: &str, routing_key: &str, message_type: &str, body: &[u8]) {
        let confirm = self
            .channel
            .basic_publish(
                exchange.into(),
                routing_key.into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                body,
                properties(message_type, Uuid::nil()),
            )
            .await
            .expect("published")
            .await
            .expect("confirmed");
        assert!(confirm.is_ack(), "{confirm:?}");
    }

    /// The next message of `queue` that `wanted` picks, with its type
    /// header; panics after [`WAIT`].
    async fn next<T: DeserializeOwned>(&self, queue: &str, wanted: impl Fn(&T) -> bool) -> (T, String) {
        let deadline = Instant::now() + WAIT;
        loop {
            let got = self
                .channel
                .basic_get(queue.into(), BasicGetOptions::default())
                .await
                .expect("get from the tap");
            match got {
                Some(message) => {
                    let delivery = message.delivery;
                    delivery.ack(BasicAckOptions::default()).await.expect("ack");
                    let message_type =
                        header_text(&delivery.properties, headers::MESSAGE_TYPE).unwrap_or_default();
                    let value = decode::<T>(&delivery.data).expect("a message of the tapped kind");
                    if wanted(&value) {
                        return (value, message_type);
                    }
                }
                None => {
                    assert!(
                        Instant::now() < deadline,
                        "nothing wanted on {queue} within {WAIT:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    /// Publishes `command` and waits for its report.
    async fn carry_out(&self, cluster: &Cluster, tap: &str, command: &ChannelCommand) -> ChannelOutcome {
        self.publish(cluster, command).await;
        self.report(tap, command.id).await
    }

    /// The report of command `id`.
    async fn report(&self, tap: &str, id: Uuid) -> ChannelOutcome {
        let (report, message_type) = self
            .next::<ChannelReport>(tap, |report| report.command_id == id)
            .await;
        assert_eq!(message_type, message_types::CHANNEL_REPORT);
        report.outcome
    }
}

fn command(environment: ApnsEnvironment, action: ChannelAction) -> ChannelCommand {
    ChannelCommand {
        v: WireVersion::CURRENT,
        id: Uuid::new_v4(),
        activity_id: Uuid::from_u128(38),
        app: "default".into(),
        environment,
        action,
    }
}

fn create(environment: ApnsEnvironment) -> ChannelCommand {
    command(
        environment,
        ChannelAction::CreateChannel {
            storage_policy: StoragePolicy::MostRecent,
        },
    )
}

fn update(home: u32, timestamp: i64) -> Value {
    let state = json!({"home": home, "away": 0});
    UpdateBody {
        end: false,
        content_state: &state,
        alert: None,
        timestamp,
        stale_date: None,
        dismissal_date: None,
        relevance_score: None,
    }
    .to_json()
    .expect("a valid update")
}

fn broadcast(channel_id: &str, payload: Value) -> ChannelCommand {
    command(
        ApnsEnvironment::Production,
        ChannelAction::Broadcast {
            channel_id: channel_id.to_owned(),
            update_id: Uuid::new_v4(),
            payload,
            priority: 10,
        },
    )
}

fn delete(channel_id: &str) -> ChannelCommand {
    command(
        ApnsEnvironment::Production,
        ChannelAction::DeleteChannel {
            channel_id: channel_id.to_owned(),
        },
    )
}

fn created(outcome: ChannelOutcome) -> String {
    match outcome {
        ChannelOutcome::Created { channel_id } => channel_id,
        other => panic!("expected a created channel, got {other:?}"),
    }
}

#[actix_web::test]
async fn channel_commands_create_broadcast_and_delete_at_apple_and_report_each_outcome() {
    let cluster = Cluster::start(options(&[])).await;
    let wire = Wire::open(&cluster).await;
    let tap = wire.tap(&cluster, routing_keys::CHANNEL_REPORT).await;
    let apns = &cluster.mocks().apns;

    let channel = created(
        wire.carry_out(&cluster, &tap, &create(ApnsEnvironment::Production))
            .await,
    );
    let sandbox = created(
        wire.carry_out(&cluster, &tap, &create(ApnsEnvironment::Sandbox))
            .await,
    );
    let mut at_apple = apns.channels.channel_ids();
    at_apple.sort();
    let mut expected = vec![channel.clone(), sandbox.clone()];
    expected.sort();
    assert_eq!(at_apple, expected, "one channel per create");
    assert_eq!(
        apns.channels.storage_policy(&channel),
        Some(1),
        "most-recent is Apple's 1"
    );

    for (home, timestamp) in [(1, 1_800_000_001), (2, 1_800_000_002)] {
        let outcome = wire
            .carry_out(&cluster, &tap, &broadcast(&channel, update(home, timestamp)))
            .await;
        assert_eq!(outcome, ChannelOutcome::Sent);
    }
    let updates = apns.channels.updates(&channel).expect("the channel exists");
    println!("two broadcasts: the channel recorded {} updates", updates.len());
    assert_eq!(updates.len(), 2, "each broadcast recorded once: {updates:?}");
    assert_eq!(updates[0]["aps"]["content-state"]["home"], 1);
    assert_eq!(updates[1]["aps"]["timestamp"], 1_800_000_002);
    assert_eq!(apns.channels.updates(&sandbox), Some(Vec::new()));

    assert_eq!(
        wire.carry_out(&cluster, &tap, &delete(&channel)).await,
        ChannelOutcome::Deleted
    );
    assert_eq!(apns.channels.deleted(), std::slice::from_ref(&channel));
    // Deleted twice (a redelivered delete): Apple no longer knows it.
    assert_eq!(
        wire.carry_out(&cluster, &tap, &delete(&channel)).await,
        ChannelOutcome::Deleted
    );
    cluster.stop().await;
}

#[actix_web::test]
async fn apples_refusals_are_reported_and_busy_answers_retried_within_the_cap() {
    // Three attempts, no retry window beyond them.
    let cluster = Cluster::start(options(&[
        "--dispatch-max-attempts=3",
        "--dispatch-retry-window-secs=0",
    ]))
    .await;
    let wire = Wire::open(&cluster).await;
    let tap = wire.tap(&cluster, routing_keys::CHANNEL_REPORT).await;
    let channels = &cluster.mocks().apns.channels;

    let outcome = wire
        .carry_out(&cluster, &tap, &broadcast("not base64!", update(1, 1)))
        .await;
    assert_eq!(
        outcome,
        ChannelOutcome::Refused {
            status: 400,
            reason: "BadChannelId".into()
        }
    );
    let unknown = "dW5rbm93bg==";
    let outcome = wire
        .carry_out(&cluster, &tap, &broadcast(unknown, update(1, 1)))
        .await;
    assert_eq!(
        outcome,
        ChannelOutcome::Refused {
            status: 404,
            reason: "ChannelNotRegistered".into()
        }
    );

    // Two busy answers (one with Retry-After), then Apple creates it.
    channels.fail_next(1, 503, "ServiceUnavailable", Some(1));
    channels.fail_next(1, 429, "TooManyRequests", None);
    let before = channels.requests();
    let started = Instant::now();
    let channel = created(
        wire.carry_out(&cluster, &tap, &create(ApnsEnvironment::Production))
            .await,
    );
    let requests = channels.requests() - before;
    println!(
        "a create answered 503 (Retry-After: 1) then 429: created after {requests} requests in {:?}",
        started.elapsed()
    );
    assert_eq!(requests, 3);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After honoured"
    );

    channels.fail_next(1, 500, "InternalServerError", None);
    let outcome = wire
        .carry_out(&cluster, &tap, &broadcast(&channel, update(3, 3)))
        .await;
    assert_eq!(outcome, ChannelOutcome::Sent);
    assert_eq!(channels.updates(&channel).map(|u| u.len()), Some(1), "sent once");

    // Busy past the cap: failed after three attempts, not retried forever.
    channels.fail_next(5, 500, "InternalServerError", None);
    let before = channels.requests();
    let outcome = wire
        .carry_out(&cluster, &tap, &broadcast(&channel, update(4, 4)))
        .await;
    let requests = channels.requests() - before;
    println!("a broadcast answered 500 every time: {outcome:?} after {requests} requests");
    assert_eq!(
        outcome,
        ChannelOutcome::Failed {
            error: "InternalServerError after 3 attempts".into()
        }
    );
    assert_eq!(requests, 3);
    assert_eq!(channels.updates(&channel).map(|u| u.len()), Some(1));
    cluster.stop().await;
}

#[actix_web::test]
async fn a_malformed_command_is_dead_lettered_and_the_next_one_still_carried_out() {
    let cluster = Cluster::start(options(&[])).await;
    let wire = Wire::open(&cluster).await;
    let tap = wire.tap(&cluster, routing_keys::CHANNEL_REPORT).await;
    wire.publish_raw(
        &cluster.names.deliver_exchange(),
        routing_keys::CHANNEL_COMMAND,
        message_types::CHANNEL_COMMAND,
        br#"{"v": 1, "id": "not a uuid"}"#,
    )
    .await;
    let dead = cluster
        .names
        .dead_letter_queue(&cluster.names.channel_command_queue());
    let deadline = Instant::now() + WAIT;
    while cluster.queue_depth(&dead).await == 0 {
        assert!(
            Instant::now() < deadline,
            "the malformed command was not dead-lettered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let channel = created(
        wire.carry_out(&cluster, &tap, &create(ApnsEnvironment::Production))
            .await,
    );
    assert!(cluster.mocks().apns.channels.channel_ids().contains(&channel));
    assert_eq!(cluster.queue_depth(&dead).await, 1);
    cluster.stop().await;
}

#[actix_web::test]
async fn a_command_whose_dispatcher_died_before_the_ack_is_carried_out_and_reported_by_another() {
    let mut cluster = Cluster::start(options(&[])).await;
    let wire = Wire::open(&cluster).await;
    let tap = wire.tap(&cluster, routing_keys::CHANNEL_REPORT).await;
    let channels = cluster.mocks().apns.channels.clone();
    channels.set_latency(Duration::from_secs(5));
    let command = create(ApnsEnvironment::Production);
    wire.publish(&cluster, &command).await;
    let deadline = Instant::now() + WAIT;
    while channels.requests() == 0 {
        assert!(Instant::now() < deadline, "the create never reached Apple");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Mid-request: no answer, no report, no ack.
    cluster.dispatchers[IOS].kill();
    channels.set_latency(Duration::ZERO);
    cluster.start_dispatcher(Platform::Ios, &[]).await;
    let channel = created(wire.report(&tap, command.id).await);
    println!(
        "a create cut by a crash: reported created by the next dispatcher; {} requests reached Apple, {} channels exist",
        channels.requests(),
        channels.channel_ids().len()
    );
    assert!(channels.channel_ids().contains(&channel));
    assert!(channels.requests() >= 2, "carried out again");
    cluster.stop().await;
}

/// An APNs token (64 hex digits) of phone `n` of a group.
fn token(group: u64, n: u64) -> String {
    format!("{group:016x}{:048x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
}

fn start(production_channel: &str) -> LiveActivityStart {
    LiveActivityStart {
        activity_id: Uuid::new_v4(),
        attributes_type: "MatchAttributes".into(),
        attributes: json!({"match": "ENG v FRA"}),
        content_state: json!({"home": 0, "away": 0}),
        alert: None,
        timestamp: Utc::now().timestamp(),
        stale_date: None,
        production_channel: Some(production_channel.to_owned()),
        sandbox_channel: None,
    }
}

fn start_notification(start: LiveActivityStart) -> Notification {
    let mut notification = Notification::alert(vec!["sport/football".into()], "");
    notification.live_activity = Some(start);
    notification
}

fn batch(
    id: Uuid,
    seq: u32,
    platform: Platform,
    environment: ApnsEnvironment,
    notification: &Notification,
    tokens: Vec<String>,
) -> TokenBatch {
    TokenBatch {
        v: WireVersion::CURRENT,
        batch_id: BatchId {
            notification_id: id,
            job_index: 0,
            seq,
        },
        platform,
        environment,
        sent_at: Utc::now(),
        notification: notification.clone(),
        locale: None,
        tokens,
        subscriptions: Vec::new(),
    }
}

#[actix_web::test]
async fn a_start_batch_pushes_liveactivity_starts_and_fails_an_environment_without_a_channel() {
    let cluster = Cluster::start(options(&[])).await;
    let wire = Wire::open(&cluster).await;
    let reports = wire.tap(&cluster, routing_keys::DELIVERY_REPORT).await;
    let apns = &cluster.mocks().apns;
    apns.state.set_keeping(true);
    let start = start("cHJvZHVjdGlvbg==");
    let notification = start_notification(start.clone());
    let id = Uuid::new_v4();
    let starters: Vec<String> = (0..3).map(|n| token(2, n)).collect();
    let sandbox: Vec<String> = (0..2).map(|n| token(3, n)).collect();
    let android: Vec<String> = (0..2).map(|n| format!("android-start-{n}")).collect();
    for message in [
        batch(
            id,
            0,
            Platform::Ios,
            ApnsEnvironment::Production,
            &notification,
            starters.clone(),
        ),
        batch(
            id,
            1,
            Platform::Ios,
            ApnsEnvironment::Sandbox,
            &notification,
            sandbox.clone(),
        ),
        batch(
            id,
            2,
            Platform::Android,
            ApnsEnvironment::Production,
            &notification,
            android,
        ),
    ] {
        wire.publish(&cluster, &message).await;
    }
    let mut counts = std::collections::BTreeMap::new();
    while counts.len() < 3 {
        let (report, _) = wire
            .next::<DeliveryReport>(&reports, |r| r.batch_id.notification_id == id)
            .await;
        counts.insert(report.batch_id.seq, (report.counts.sent, report.counts.failed));
    }
    let counts: Vec<(u32, u32)> = counts.into_values().collect();
    println!("start batches (production, sandbox without a channel, android): (sent, failed) {counts:?}");
    assert_eq!(counts, [(3, 0), (0, 2), (0, 2)]);

    let received = apns.state.received();
    let mut pushed: Vec<&str> = received.iter().map(|push| push.token.as_str()).collect();
    pushed.sort_unstable();
    let mut expected: Vec<&str> = starters.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(pushed, expected, "only the production batch reached Apple");
    let push = &received[0];
    assert_eq!(push.header("apns-push-type"), Some("liveactivity"));
    assert_eq!(
        push.header("apns-topic"),
        Some(format!("{}.push-type.liveactivity", apns.bundle_id).as_str())
    );
    assert_eq!(push.header("apns-priority"), Some("10"));
    let body = push.json();
    assert_eq!(body["aps"]["event"], "start");
    assert_eq!(body["aps"]["input-push-channel"], "cHJvZHVjdGlvbg==");
    assert_eq!(body["aps"]["attributes-type"], "MatchAttributes");
    assert_eq!(body["aps"]["attributes"]["match"], "ENG v FRA");
    assert_eq!(body["aps"]["timestamp"], start.timestamp);
    assert_eq!(body["notification_id"], id.to_string());
    cluster.stop().await;
}

/// Registers `tokens` on `sport/football` with a kind and attributes type.
async fn seed(sql: &tokio_postgres::Client, tokens: &[String], kind: &str, attributes_type: Option<&str>) {
    for token in tokens {
        sql.execute(
            "INSERT INTO registrations (topic, shard, token, platform, apns_environment, kind, attributes_type)
             VALUES ('sport/football', $1, $2, 'ios', 'production', $3, $4)",
            &[&(shard_of(token) as i16), token, &kind, &attributes_type],
        )
        .await
        .expect("registration seeded");
    }
}

/// Harvests `notification` as one job over the whole shard space and
/// returns the iOS tokens batched for it.
async fn harvest(cluster: &Cluster, wire: &Wire, jobs: &str, notification: Notification) -> Vec<String> {
    let id = Uuid::new_v4();
    let job = ShardJob {
        v: WireVersion::CURRENT,
        notification_id: id,
        job_index: 0,
        jobs_planned: 1,
        shards: ShardRange::new(0, SHARD_SPACE).expect("the whole space"),
        sent_at: Utc::now(),
        notification,
        primary_lsn: None,
    };
    wire.publish(cluster, &job).await;
    wire.next::<JobReport>(jobs, |report| report.notification_id == id)
        .await;
    let mut tokens: Vec<String> = cluster
        .take_queued_batches(Platform::Ios)
        .await
        .into_iter()
        .filter(|batch| batch.batch_id.notification_id == id)
        .flat_map(|batch| batch.tokens)
        .collect();
    tokens.sort();
    tokens
}

#[actix_web::test]
async fn a_start_harvests_only_push_to_start_tokens_of_its_attributes_type_and_alerts_skip_them() {
    let cluster = Cluster::start(ClusterOptions {
        harvesters: 1,
        ..ClusterOptions::default()
    })
    .await;
    let wire = Wire::open(&cluster).await;
    let jobs = wire.tap(&cluster, routing_keys::JOB_REPORT).await;
    let sql = cluster.sql().await;
    let mut devices: Vec<String> = (0..5).map(|n| token(1, n)).collect();
    let mut matches: Vec<String> = (0..4).map(|n| token(2, n)).collect();
    let elections: Vec<String> = (0..3).map(|n| token(3, n)).collect();
    seed(&sql, &devices, "device", None).await;
    seed(&sql, &matches, "push_to_start", Some("MatchAttributes")).await;
    seed(&sql, &elections, "push_to_start", Some("ElectionAttributes")).await;
    devices.sort();
    matches.sort();

    let started = harvest(&cluster, &wire, &jobs, start_notification(start("Y2hhbm5lbA=="))).await;
    println!(
        "a MatchAttributes start over 5 devices, 4 match and 3 election push-to-start tokens: {} harvested",
        started.len()
    );
    assert_eq!(started, matches, "only push-to-start tokens of MatchAttributes");
    let alert = Notification::alert(vec!["sport/football".into()], "Goal");
    let alerted = harvest(&cluster, &wire, &jobs, alert).await;
    assert_eq!(alerted, devices, "an alert reads device tokens only");

    // The alert's harvest stays an index-only scan of the key (V35).
    sql.batch_execute(
        "INSERT INTO registrations (topic, shard, token, platform)
         SELECT 'sport/football', n % 1024, md5(n::text), 'android' FROM generate_series(1, 5000) n",
    )
    .await
    .expect("bulk rows");
    // VACUUM marks the pages all-visible (what autovacuum does in service).
    sql.batch_execute("VACUUM ANALYZE registrations")
        .await
        .expect("vacuumed");
    let explain = format!(
        "EXPLAIN (FORMAT JSON) {}",
        clarion_harvester::harvest::ONE_TOPIC
            .replace("$1", "'sport/football'")
            .replace("$2", "0")
            .replace("$3", "64")
            .replace("$4", "'default'")
    );
    let plan: Value = sql
        .query_one(explain.as_str(), &[])
        .await
        .expect("explained")
        .get(0);
    let scan = find_scan(&plan[0]["Plan"]).expect("a scan of registrations");
    assert_eq!(scan["Node Type"], "Index Only Scan", "{plan}");
    cluster.stop().await;
}

/// The plan node that reads `registrations`.
fn find_scan(node: &Value) -> Option<&Value> {
    if node["Relation Name"] == "registrations" {
        return Some(node);
    }
    node["Plans"].as_array()?.iter().find_map(find_scan)
}
