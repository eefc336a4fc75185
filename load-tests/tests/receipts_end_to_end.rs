//! Device receipts end to end (issue 35): a send to devices behind the mock
//! APNs and FCM, whose phones post receipts to the coordinator; the
//! status and the curve show exactly what the phones report having sent.

use std::time::{Duration, Instant};

use clarion_load_tests::mocks::phones::DelayDistribution;
use clarion_load_tests::mocks::{ReceiptStats, ReceiptsConfig};
use clarion_load_tests::testkit::{Cluster, ClusterOptions, alternating_devices, seed_devices};
use clarion_proto::Platform;
use serde_json::{Value, json};

const DEVICES: u64 = 400;
const SETTLE_WITHIN: Duration = Duration::from_secs(120);

fn phones() -> ReceiptsConfig {
    ReceiptsConfig {
        seed: 35,
        online_share: 0.8,
        receive_delay: DelayDistribution {
            median: Duration::from_millis(300),
            spread: 0.8,
        },
        open_share: 0.3,
        open_delay: DelayDistribution {
            median: Duration::from_millis(500),
            spread: 0.5,
        },
        flush_every: Duration::from_millis(50),
        give_up_after: Duration::from_secs(20),
        ..ReceiptsConfig::new("set by the cluster", "set by the cluster")
    }
}

fn phones_total(cluster: &Cluster) -> ReceiptStats {
    let mut total = ReceiptStats::default();
    for platform in Platform::ALL {
        let stats = cluster.mocks().state(platform).receipts().expect("phones report");
        total.scheduled += stats.scheduled;
        total.silent += stats.silent;
        total.pending += stats.pending;
        total.in_flight += stats.in_flight;
        total.received += stats.received;
        total.opened += stats.opened;
        total.rejected += stats.rejected;
        total.failed += stats.failed;
        total.dropped += stats.dropped;
        total.server_accepted += stats.server_accepted;
        total.server_duplicates += stats.server_duplicates;
        total.server_ignored += stats.server_ignored;
    }
    total
}

#[actix_web::test]
async fn the_device_figures_are_what_the_phones_behind_the_mocks_reported() {
    let cluster = Cluster::start(ClusterOptions {
        harvesters: 1,
        dispatchers: true,
        receipts: Some(phones()),
        ..ClusterOptions::default()
    })
    .await;
    let sql = cluster.sql().await;
    seed_devices(&sql, &alternating_devices(DEVICES, &["breaking/uk"]))
        .await
        .unwrap();
    sql.execute("UPDATE registrations SET receipts = true", &[])
        .await
        .unwrap();
    cluster
        .wait_for_topic_size("breaking/uk", DEVICES, Duration::from_secs(30))
        .await;
    let (status, answer) = cluster
        .send(&json!({"topics": ["breaking/uk"], "body": "Receipts, please"}))
        .await;
    assert!(status.is_success(), "{answer}");
    let id = answer["id"].as_str().unwrap().to_owned();
    cluster.wait_until_settled(&id, Duration::from_secs(120)).await;

    // Every accepted push has its fate decided, and every receipt is posted.
    let started = Instant::now();
    let phones = loop {
        let total = phones_total(&cluster);
        if total.scheduled + total.silent == DEVICES && total.settled() {
            break total;
        }
        assert!(
            started.elapsed() < SETTLE_WITHIN,
            "the phones did not settle: {total:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(phones.failed + phones.rejected + phones.dropped, 0, "{phones:?}");
    assert!(phones.received > 0 && phones.opened > 0, "{phones:?}");
    assert_eq!(
        phones.server_accepted,
        phones.received + phones.opened,
        "{phones:?}"
    );
    assert_eq!(phones.server_ignored, 0);

    let device = cluster
        .wait_for_status(&id, Duration::from_secs(30), |status| {
            status["device"]["reporting"] == DEVICES
        })
        .await["device"]
        .clone();
    assert_eq!(device["received"], phones.received, "{device}");
    assert_eq!(device["opened"], phones.opened, "{device}");
    let share = |n: u64| (n as f64 * 10_000.0 / DEVICES as f64).round() / 100.0;
    assert_eq!(device["received_percent"], share(phones.received));
    assert_eq!(device["opened_percent"], share(phones.opened));
    assert_eq!(
        device["buckets"]["300"], phones.received,
        "all within five minutes: {device}"
    );
    // 80% online: 90% of the reporting audience is never reached.
    assert_eq!(device["t90_ms"], Value::Null, "{device}");
    assert!(device["t50_ms"].as_u64().is_some(), "{device}");

    let curve: Value = cluster
        .http
        .get(format!("{}/api/v1/notifications/{id}/curve", cluster.base))
        .bearer_auth(clarion_load_tests::testkit::DESK_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let last = |name: &str| {
        curve[name]
            .as_array()
            .and_then(|p| p.last())
            .map(|p| p[1].clone())
    };
    assert_eq!(
        last("received"),
        Some(json!(phones.received as f64 / DEVICES as f64)),
        "{curve}"
    );
    assert_eq!(
        last("opened"),
        Some(json!(phones.opened as f64 / DEVICES as f64)),
        "{curve}"
    );
    assert_eq!(last("accepted"), Some(json!(1.0)), "{curve}");
    cluster.stop().await;
}
