//! `/metrics` scraped after a send: the counters match what was sent.
//! (Its own test binary: the metrics recorder is process-wide.)

use std::time::Duration;

use clarion_load_tests::testkit::{Cluster, ClusterOptions, Device, seed_devices};
use clarion_proto::Platform;
use reqwest::StatusCode;
use serde_json::json;

#[actix_web::test]
async fn the_counters_match_what_was_sent() {
    clarion_runtime::metrics::install().expect("the metrics recorder installs");
    let cluster = Cluster::start(ClusterOptions {
        harvesters: 1,
        dispatchers: true,
        ..ClusterOptions::default()
    })
    .await;
    let devices: Vec<Device> = (0..240u64)
        .map(|n| {
            if n % 3 == 0 {
                Device::ios(n, &["t"])
            } else {
                Device::android(n, &["t"])
            }
        })
        .collect();
    seed_devices(&cluster.sql().await, &devices).await.unwrap();
    let (status, accepted) = cluster.send(&json!({"topics": ["t"], "body": "counted"})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let id = accepted["id"].as_str().unwrap().to_owned();
    cluster.wait_until_settled(&id, Duration::from_secs(60)).await;
    // Made-up methods must not each become a series.
    for n in 0..20 {
        let method = reqwest::Method::from_bytes(format!("MADEUP{n}").as_bytes()).unwrap();
        cluster
            .http
            .request(method, format!("{}/api/v1/notifications", cluster.base))
            .send()
            .await
            .unwrap();
    }

    let scrape = cluster
        .http
        .get(format!("{}/metrics", cluster.base))
        .send()
        .await
        .unwrap();
    assert_eq!(scrape.status(), StatusCode::OK);
    let text = scrape.text().await.unwrap();
    let value = |series: &str| -> f64 {
        text.lines()
            .find(|line| line.starts_with(series))
            .and_then(|line| line.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    let mock = |platform| cluster.mocks().state(platform).accounting.stats().accepted as f64;
    assert_eq!(
        value(r#"clarion_dispatcher_pushes_total{platform="ios",result="sent"}"#),
        mock(Platform::Ios)
    );
    assert_eq!(
        value(r#"clarion_dispatcher_pushes_total{platform="android",result="sent"}"#),
        mock(Platform::Android)
    );
    assert_eq!(mock(Platform::Ios), 80.0);
    assert_eq!(value(r#"clarion_harvester_tokens_total{platform="ios"}"#), 80.0);
    assert_eq!(
        value(r#"clarion_harvester_tokens_total{platform="android"}"#),
        160.0
    );
    assert_eq!(value("clarion_coordinator_notifications_completed_total"), 1.0);
    assert_eq!(value("clarion_coordinator_ninety_in_two_ratio"), 1.0);
    assert_eq!(
        value(r#"clarion_coordinator_notifications_total{outcome="accepted",lane="standard"}"#),
        1.0
    );
    assert!(value(r#"clarion_coordinator_time_to_delivery_seconds_count{quantile="t90"}"#) >= 1.0);
    // Counters worth an alert exist before their first event.
    assert_eq!(value("clarion_api_sends_rate_limited_total"), 0.0);
    assert_eq!(
        value(r#"clarion_coordinator_jobs_published_total{lane="urgent"}"#),
        0.0
    );
    assert_eq!(
        value(r#"clarion_coordinator_api_keys_reloads_total{outcome="invalid"}"#),
        0.0
    );
    assert!(
        text.contains(
            r#"clarion_api_requests_total{method="POST",route="/api/v1/notifications",status="202"}"#
        )
    );
    assert!(!text.contains("MADEUP"), "a made-up method is no label");
    assert!(text.contains(r#"clarion_api_requests_total{method="other""#));
    assert!(text.contains("clarion_dispatcher_http2_connections_opened_total"));
    assert!(text.contains("clarion_db_pool_connections"));
    cluster.stop().await;
}
