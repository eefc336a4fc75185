//! The test kit's Live Activity calls: push-to-start registrations and the
//! desk's requests to `/api/v1/live-activities`, for the end-to-end and
//! console tests.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{APP_KEY, Cluster, DESK_KEY};

/// How often [`Cluster::wait_for_activity`] looks again.
const POLL: Duration = Duration::from_millis(50);

impl Cluster {
    /// Registers `token` as an iOS push-to-start token of `attributes_type`
    /// in APNs `environment` on `topics`; panics unless answered 200.
    pub async fn register_push_to_start(
        &self,
        token: &str,
        attributes_type: &str,
        environment: &str,
        topics: &[&str],
    ) {
        let response = self
            .http
            .put(format!("{}/api/v1/registrations/{token}", self.base))
            .bearer_auth(APP_KEY)
            .json(
                &json!({"platform": "ios", "kind": "push_to_start", "attributes_type": attributes_type,
                          "environment": environment, "topics": topics}),
            )
            .send()
            .await
            .expect("registration answered");
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or_default();
        assert_eq!(status, StatusCode::OK, "{answer}");
    }

    /// `method` on `path` with the desk's key (scope `send`): the status
    /// and the JSON answer (null when none).
    pub async fn desk(&self, method: Method, path: &str, body: Option<&Value>) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(DESK_KEY)
            .timeout(Duration::from_secs(30));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.expect("answered");
        let status = response.status();
        (status, response.json().await.unwrap_or_default())
    }

    /// Polls `GET /api/v1/live-activities/{id}` until `done` holds; panics
    /// with the last answer after `timeout`.
    pub async fn wait_for_activity(
        &self,
        id: &str,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        let path = format!("/api/v1/live-activities/{id}");
        loop {
            let (status, activity) = self.desk(Method::GET, &path, None).await;
            assert_eq!(status, StatusCode::OK, "{activity}");
            if done(&activity) {
                return activity;
            }
            assert!(
                Instant::now() < deadline,
                "activity not there within {timeout:?}: {activity}"
            );
            tokio::time::sleep(POLL).await;
        }
    }
}
