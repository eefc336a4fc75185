//! A scheduled data-hygiene run is counted on `/metrics`. (Its own test
//! binary: the metrics recorder is process-wide.)

#[allow(dead_code)]
#[path = "api/common.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use tokio_postgres::NoTls;

#[actix_web::test]
async fn a_scheduled_run_is_counted_in_the_metrics() {
    clarion_runtime::metrics::install().expect("the metrics recorder installs");
    let app = TestCoordinator::start_with(&["--hygiene-interval-secs=1"]).await;
    let token = ios_token(42);
    let response = app
        .put_registration(&token, registration("ios", &["metrics/a", "metrics/b"]))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let (client, connection) = tokio_postgres::connect(&app.db.url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
        .execute(
            "UPDATE registrations SET updated_at = now() - interval '300 days' WHERE token = $1",
            &[&token],
        )
        .await
        .unwrap();

    let value = |text: &str, series: &str| -> Option<f64> {
        text.lines()
            .find(|line| line.starts_with(series))
            .and_then(|line| line.rsplit(' ').next()?.parse().ok())
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = app
            .request(reqwest::Method::GET, "/metrics", None)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if value(&text, "clarion_coordinator_hygiene_registrations_purged_total") == Some(2.0) {
            break text;
        }
        assert!(Instant::now() < deadline, "no run counted the purge:\n{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let runs = value(&text, r#"clarion_coordinator_hygiene_runs_total{outcome="ran"}"#);
    assert!(runs.is_some_and(|runs| runs >= 1.0), "{text}");
    let removed = value(
        &text,
        r#"clarion_coordinator_hygiene_detail_rows_removed_total{table="delivery_batches"}"#,
    );
    assert_eq!(removed, Some(0.0), "{text}");
    assert!(
        value(&text, "clarion_coordinator_hygiene_last_run_duration_seconds").is_some(),
        "{text}"
    );
    app.stop().await;
}
