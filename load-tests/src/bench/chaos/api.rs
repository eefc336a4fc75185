//! What the chaos suite asks the coordinator's API: the topic every
//! scenario sends to, the deadline of one answer, and a cancel retried
//! while the broker does not confirm it.

use std::time::Duration;

use anyhow::Result;
use reqwest::StatusCode;
use serde_json::Value;

use crate::local_cluster::{DESK_KEY, LocalCluster};

/// Longest wait for one answer of the coordinator's API.
pub(super) const API_TIMEOUT: Duration = Duration::from_secs(15);
/// The topic of the audience.
pub(super) const TOPIC: &str = "breaking/uk";

/// `POST …/cancel`, retried while the broker does not confirm (503).
pub(super) async fn cancel(cluster: &LocalCluster, id: &str) -> Result<(StatusCode, Value)> {
    let url = format!("{}/api/v1/notifications/{id}/cancel", cluster.base);
    let mut last = (StatusCode::SERVICE_UNAVAILABLE, Value::Null);
    for _ in 0..5 {
        let response = cluster
            .http
            .post(&url)
            .bearer_auth(DESK_KEY)
            .timeout(API_TIMEOUT)
            .send()
            .await?;
        let code = response.status();
        let body = response.json().await.unwrap_or(Value::Null);
        if code != StatusCode::SERVICE_UNAVAILABLE {
            return Ok((code, body));
        }
        last = (code, body);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(last)
}
