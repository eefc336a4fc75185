//! The ceiling: how many pushes per second the mocks absorb from a minimal
//! client built on Clarion's own HTTP/2 transport, with no pipeline around
//! it (no queues, no batches, no reports). Benchmark results are reported as
//! ratios to it, so they mean the same on a faster or slower machine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use clarion_dispatcher::apns::token::ProviderToken;
use clarion_dispatcher::http2::{Http2Pool, Liveness, PoolLimits, client_config};
use futures::StreamExt;
use http::{HeaderValue, Method, Request};
use serde::Serialize;
use serde_json::json;

use crate::mocks::{ApnsMock, FcmMock};

/// The notification id the minimal client's pushes carry (the mocks refuse
/// a push without one, as every Clarion push has one).
pub const CEILING_NOTIFICATION_ID: &str = "00000000-0000-4000-8000-0000000ce111";

/// What one minimal client achieved.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CeilingRun {
    pub requests: u64,
    pub accepted: u64,
    pub seconds: f64,
    pub per_s: f64,
}

/// How hard the minimal clients push.
#[derive(Debug, Clone, Copy)]
pub struct CeilingPlan {
    /// Requests per mock.
    pub requests: u64,
    pub connections: usize,
    /// Requests in flight per client.
    pub in_flight: usize,
}

/// Both mocks driven at once (as both dispatchers drive them), by one
/// minimal client each.
pub async fn measure(apns: &ApnsMock, fcm: &FcmMock, plan: CeilingPlan) -> Result<(CeilingRun, CeilingRun)> {
    let (ios, android) = tokio::join!(apns_ceiling(apns, plan), fcm_ceiling(fcm, plan));
    Ok((ios?, android?))
}

async fn apns_ceiling(mock: &ApnsMock, plan: CeilingPlan) -> Result<CeilingRun> {
    let tls = client_config(Some(&mock.ca_file), &[b"h2"])?;
    let pool = Arc::new(Http2Pool::new(&mock.endpoint, tls, limits(plan)).map_err(anyhow::Error::msg)?);
    let token = ProviderToken::new(
        &mock.key_file,
        &mock.key_id,
        &mock.team_id,
        Duration::from_secs(2400),
    )
    .map_err(anyhow::Error::msg)?;
    let body = Bytes::from(
        json!({"aps": {"alert": {"title": "Ceiling", "body": "minimal client"}},
                           "notification_id": CEILING_NOTIFICATION_ID})
        .to_string(),
    );
    let topic = HeaderValue::from_str(&mock.bundle_id)?;
    let device = "0123456789abcdef".repeat(4);
    let uri = pool.uri(format!("/3/device/{device}"))?;
    drive(plan, move |_| {
        let (uri, topic, authorization) = (uri.clone(), topic.clone(), token.header());
        let request = move || {
            let mut request = Request::new(());
            *request.method_mut() = Method::POST;
            *request.uri_mut() = uri.clone();
            let headers = request.headers_mut();
            headers.insert("apns-topic", topic.clone());
            headers.insert("apns-push-type", HeaderValue::from_static("alert"));
            headers.insert(http::header::AUTHORIZATION, authorization.clone());
            request
        };
        let pool = pool.clone();
        let body = body.clone();
        async move { pool.send(request, body).await.is_ok_and(|r| r.status == 200) }
    })
    .await
}

async fn fcm_ceiling(mock: &FcmMock, plan: CeilingPlan) -> Result<CeilingRun> {
    let tls = client_config(Some(&mock.ca_file), &[b"h2"])?;
    let pool = Arc::new(Http2Pool::new(&mock.endpoint, tls, limits(plan)).map_err(anyhow::Error::msg)?);
    let (_, auth) =
        clarion_dispatcher::fcm::auth::from_credentials(&mock.credentials_file, Some(&mock.ca_file))
            .await
            .map_err(anyhow::Error::msg)?;
    let authorization = auth.header().await.map_err(anyhow::Error::msg)?;
    let device = format!("ceiling:APA91b{}", "Ab-_9".repeat(24));
    let body = Bytes::from(
        json!({"message": {"token": device, "notification": {"title": "Ceiling", "body": "minimal client"},
                           "android": {"priority": "high", "ttl": "3600s"},
                           "data": {"notification_id": CEILING_NOTIFICATION_ID}}})
        .to_string(),
    );
    let uri = pool
        .uri(format!("/v1/projects/{}/messages:send", mock.project_id))
        .context("the FCM URI")?;
    drive(plan, move |_| {
        let (uri, authorization) = (uri.clone(), authorization.clone());
        let request = move || {
            let mut request = Request::new(());
            *request.method_mut() = Method::POST;
            *request.uri_mut() = uri.clone();
            let headers = request.headers_mut();
            headers.insert(http::header::AUTHORIZATION, authorization.clone());
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            request
        };
        let pool = pool.clone();
        let body = body.clone();
        async move { pool.send(request, body).await.is_ok_and(|r| r.status == 200) }
    })
    .await
}

fn limits(plan: CeilingPlan) -> PoolLimits {
    PoolLimits {
        connections: plan.connections,
        streams_per_connection: 1000,
        timeout: Duration::from_secs(10),
        liveness: Liveness::default(),
    }
}

/// Runs `plan.requests` requests (`request(n)` for the n-th),
/// `plan.in_flight` at a time; counts those that returned true.
pub(crate) async fn drive<F, Fut>(plan: CeilingPlan, request: F) -> Result<CeilingRun>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    let accepted = futures::stream::iter(0..plan.requests)
        .map(&request)
        .buffer_unordered(plan.in_flight.max(1))
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await as u64;
    let seconds = started.elapsed().as_secs_f64();
    Ok(CeilingRun {
        requests: plan.requests,
        accepted,
        seconds,
        per_s: accepted as f64 / seconds.max(1e-9),
    })
}
