//! A collector that accepts connections and never answers must not hurt
//! delivery, and the exporter's queue stays bounded: spans beyond it are
//! dropped and counted. (Its own test binary: telemetry is process-wide.)

use std::time::Duration;

use clarion_load_tests::testkit::{Cluster, ClusterOptions, alternating_devices, platforms_of, seed_devices};
use clarion_proto::Platform;
use clarion_runtime::LogSettings;
use clarion_runtime::settings::LogFormat;
use clarion_runtime::telemetry::{self, OtlpSettings};
use reqwest::StatusCode;
use serde_json::json;
use tokio::net::TcpListener;

#[actix_web::test]
async fn a_hanging_collector_costs_neither_deliveries_nor_unbounded_memory() {
    // Takes connections, reads nothing, answers nothing.
    let hanging = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", hanging.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hanging.accept().await {
            held.push(socket);
        }
    });
    let _telemetry = telemetry::init(
        &LogSettings {
            format: LogFormat::Text,
            filter: "warn".into(),
        },
        &OtlpSettings {
            endpoint: Some(endpoint),
            queue_size: 16,
            timeout_secs: 2,
        },
        vec![
            clarion_coordinator::trace_service(),
            clarion_harvester::trace_service(),
            clarion_dispatcher::trace_service(Platform::Ios),
        ],
    )
    .expect("telemetry installs");
    let metrics = clarion_runtime::metrics::install().expect("the metrics recorder installs");

    let cluster = Cluster::start(ClusterOptions {
        coordinator: vec!["--tokens-per-job=200".into()],
        harvester: vec!["--batch-size=50".into()],
        harvesters: 1,
        dispatchers: true,
        ..ClusterOptions::default()
    })
    .await;
    let devices = alternating_devices(2000, &["t"]);
    seed_devices(&cluster.sql().await, &devices).await.unwrap();
    cluster.topic_size("t").await;
    let (status, accepted) = cluster.send(&json!({"topics": ["t"], "body": "untraced"})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let id = accepted["id"].as_str().unwrap().to_owned();
    let status = cluster.wait_until_settled(&id, Duration::from_secs(60)).await;
    assert_eq!(status["status"], "complete", "{status}");
    for platform in platforms_of(&devices) {
        let stats = cluster.mocks().state(platform).accounting.stats();
        assert_eq!(stats.unique_tokens, 1000, "{platform}: every device delivered");
    }

    let rendered = metrics.render();
    let dropped = metric_total(&rendered, "clarion_telemetry_spans_dropped_total");
    assert!(dropped > 0.0, "spans beyond the queue are dropped and counted");
    cluster.stop().await;
}

/// The sum of every series of `name` in a Prometheus text exposition.
fn metric_total(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(name) && !line.starts_with('#'))
        .filter(|line| line[name.len()..].starts_with(['{', ' ']))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
