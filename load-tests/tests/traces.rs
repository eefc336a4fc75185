//! One trace per notification, end to end: the real OTLP exporter of every
//! service in this process sends to an in-test OTLP/HTTP receiver. (Its own
//! test binary: the tracing subscriber is process-wide.)

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use clarion_load_tests::testkit::otlp::{OtlpReceiver, ReceivedSpan};
use clarion_load_tests::testkit::{Cluster, ClusterOptions, alternating_devices, seed_devices};
use clarion_proto::Platform;
use clarion_runtime::LogSettings;
use clarion_runtime::settings::LogFormat;
use clarion_runtime::telemetry::{self, OtlpSettings};
use reqwest::StatusCode;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

#[actix_web::test]
async fn a_notification_is_one_trace_across_every_process_and_queue() {
    let receiver = OtlpReceiver::start().await;
    let _telemetry = telemetry::init(
        &LogSettings {
            format: LogFormat::Text,
            filter: "info".into(),
        },
        &OtlpSettings {
            endpoint: Some(receiver.endpoint.clone()),
            queue_size: 100_000,
            timeout_secs: 5,
        },
        vec![
            clarion_coordinator::trace_service(),
            clarion_harvester::trace_service(),
            clarion_dispatcher::trace_service(Platform::Ios),
        ],
    )
    .expect("telemetry installs");

    let cluster = Cluster::start(ClusterOptions {
        coordinator: vec!["--tokens-per-job=100".into()],
        harvester: vec!["--batch-size=40".into()],
        harvesters: 2,
        dispatchers: true,
        ..ClusterOptions::default()
    })
    .await;
    let devices = alternating_devices(300, &["t"]);
    seed_devices(&cluster.sql().await, &devices).await.unwrap();
    cluster.topic_size("t").await;
    let (status, accepted) = cluster.send(&json!({"topics": ["t"], "body": "traced"})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let id = accepted["id"].as_str().unwrap().to_owned();
    let status = cluster.wait_until_settled(&id, WAIT).await;
    let trace_id = status["trace_id"]
        .as_str()
        .expect("the status names the trace")
        .to_owned();
    assert_eq!(trace_id.len(), 32);
    let batches: i64 = cluster
        .sql()
        .await
        .query_one(
            "SELECT batches_expected FROM notifications WHERE id::text = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);

    // Spans are exported as their work ends, a little after the status
    // moves (the batch processor sends every 500 ms): wait until the ones
    // this test counts have all arrived.
    let planned = status["jobs"]["planned"].as_i64().unwrap();
    let deadline = Instant::now() + WAIT;
    let spans = loop {
        let spans = receiver.spans();
        let of = |name: &str| {
            spans
                .iter()
                .filter(|s| s.trace_id == trace_id && s.name == name)
                .count() as i64
        };
        // At least as many as expected: the assertions below check exactly.
        if of("POST /api/v1/notifications") >= 1
            && of("harvest shard job") >= planned
            && of("stream registrations") >= planned
            && of("deliver batch") >= batches
        {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "spans of the trace still missing after {WAIT:?}: request {}, jobs {} / {planned}, \
             queries {} / {planned}, batches {} / {batches}",
            of("POST /api/v1/notifications"),
            of("harvest shard job"),
            of("stream registrations"),
            of("deliver batch"),
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let of_notification: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.attributes.get("notification.id") == Some(&id))
        .collect();
    let trace_ids: HashSet<&str> = of_notification.iter().map(|s| s.trace_id.as_str()).collect();
    assert_eq!(
        trace_ids,
        HashSet::from([trace_id.as_str()]),
        "exactly one trace for the notification"
    );

    let trace: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.trace_id == trace_id).collect();
    let count = |name: &str| trace.iter().filter(|s| s.name == name).count() as i64;
    let services: HashSet<&str> = trace.iter().map(|s| s.service.as_str()).collect();
    for service in ["clarion-coordinator", "clarion-harvester", "clarion-dispatcher"] {
        assert!(services.contains(service), "{service} missing from {services:?}");
    }
    assert_eq!(count("harvest shard job"), planned, "one span per shard job");
    assert_eq!(count("deliver batch"), batches, "one span per batch");
    assert_eq!(
        count("stream registrations"),
        count("harvest shard job"),
        "one query per job"
    );
    let platforms: HashSet<&str> = trace
        .iter()
        .filter(|s| s.name == "deliver batch")
        .filter_map(|s| s.attributes.get("platform").map(String::as_str))
        .collect();
    assert_eq!(platforms, HashSet::from(["ios", "android"]), "both dispatchers");

    // Parent links are unbroken across RabbitMQ: every parent is in the trace.
    let ids: HashSet<&str> = trace.iter().map(|s| s.span_id.as_str()).collect();
    let roots: Vec<&str> = trace
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        roots,
        vec!["POST /api/v1/notifications"],
        "the send request is the only root"
    );
    for span in &trace {
        assert!(
            span.parent_span_id.is_empty() || ids.contains(span.parent_span_id.as_str()),
            "{} has a parent outside the trace",
            span.name
        );
    }

    let first = |name: &str| -> &HashMap<String, String> {
        &trace
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name} span"))
            .attributes
    };
    let job = first("harvest shard job");
    assert_eq!(job["messaging.system"], "rabbitmq");
    assert!(
        job.contains_key("shard.range") && job.contains_key("tokens"),
        "{job:?}"
    );
    let query = first("stream registrations");
    assert_eq!(query["db.system.name"], "postgresql");
    assert!(query.contains_key("db.response.returned_rows"), "{query:?}");
    let batch = first("deliver batch");
    for key in [
        "batch.id", "platform", "provider", "tokens", "sent", "invalid", "retries",
    ] {
        assert!(batch.contains_key(key), "deliver batch lacks {key}: {batch:?}");
    }
    let delivered: i64 = trace
        .iter()
        .filter(|s| s.name == "deliver batch")
        .map(|s| s.attributes["sent"].parse::<i64>().unwrap())
        .sum();
    assert_eq!(delivered, 300, "the batch spans account for every push");

    // A send that carries the caller's trace context continues that trace.
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let response = cluster
        .http
        .post(format!("{}/api/v1/notifications", cluster.base))
        .bearer_auth(clarion_load_tests::testkit::DESK_KEY)
        .header("traceparent", format!("00-{caller_trace}-00f067aa0ba902b7-01"))
        .json(&json!({"topics": ["t"], "body": "continued"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let accepted: serde_json::Value = response.json().await.unwrap();
    let continued = cluster
        .wait_until_settled(accepted["id"].as_str().unwrap(), WAIT)
        .await;
    assert_eq!(continued["trace_id"], caller_trace, "the caller's trace goes on");
    cluster.stop().await;
}
