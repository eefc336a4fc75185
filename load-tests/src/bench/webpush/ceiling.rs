//! The web share's ceiling: a minimal encrypting client, with no pipeline
//! around it (no queues, batches or reports), driving the mock web push
//! service. Each push is what a push needs and nothing more: the message
//! encrypted for its subscription (RFC 8291, the dispatcher's code), the
//! VAPID header (cached per origin, as the dispatcher's), one HTTP/2
//! request on Clarion's own transport.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use clarion_dispatcher::http2::{Http2Pool, Liveness, PoolLimits, client_config};
use clarion_dispatcher::webpush::encrypt::encrypt;
use clarion_dispatcher::webpush::push_request;
use clarion_dispatcher::webpush::vapid::Vapid;
use clarion_proto::web_push::{AUTH_BYTES, P256DH_BYTES, base64url_decode};
use http::{HeaderValue, Uri};
use serde_json::json;

use crate::bench::ceiling::{CEILING_NOTIFICATION_ID, CeilingPlan, CeilingRun, drive};
use crate::mocks::WebPushMock;

/// Distinct seeded browsers pushed to, in turn.
const SUBSCRIPTIONS: usize = 64;

/// One browser: where to push and its keys.
struct Target {
    uri: Uri,
    key: [u8; P256DH_BYTES],
    auth: [u8; AUTH_BYTES],
}

pub async fn measure(mock: &WebPushMock, plan: CeilingPlan) -> Result<CeilingRun> {
    let tls = client_config(Some(&mock.ca_file), &[b"h2"])?;
    let limits = PoolLimits {
        connections: plan.connections,
        streams_per_connection: 1000,
        timeout: Duration::from_secs(10),
        liveness: Liveness::default(),
    };
    let pool = Arc::new(Http2Pool::new(&mock.origin, tls, limits).map_err(anyhow::Error::msg)?);
    let vapid = Vapid::load(&mock.vapid_key_file, &mock.vapid_subject).map_err(|e| anyhow::anyhow!("{e}"))?;
    let authorization = vapid
        .authorization(&mock.origin)
        .context("no VAPID header for the mock's origin")?;
    let targets = (0..SUBSCRIPTIONS)
        .map(|n| {
            let s = mock.seeded_subscription(&format!("webpushceiling{n:06}"))?;
            let key = base64url_decode(&s.p256dh).context("base64url")?;
            let auth = base64url_decode(&s.auth).context("base64url")?;
            Ok(Target {
                uri: s.endpoint.parse()?,
                key: key.try_into().map_err(|_| anyhow::anyhow!("a 65-byte key"))?,
                auth: auth
                    .try_into()
                    .map_err(|_| anyhow::anyhow!("a 16-byte auth secret"))?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let targets = Arc::new(targets);
    let plaintext = json!({"title": "Ceiling", "body": "minimal encrypting client",
                           "notification_id": CEILING_NOTIFICATION_ID})
    .to_string()
    .into_bytes();

    drive(plan, |n| {
        let (pool, targets, authorization) = (pool.clone(), targets.clone(), authorization.clone());
        let plaintext = plaintext.clone();
        async move {
            let target = &targets[n as usize % targets.len()];
            let Ok(body) = encrypt(&plaintext, &target.key, &target.auth) else {
                return false;
            };
            let (ttl, urgency) = (HeaderValue::from_static("3600"), HeaderValue::from_static("high"));
            let request = || push_request(&target.uri, &authorization, &ttl, &urgency, None);
            pool.send(request, Bytes::from(body))
                .await
                .is_ok_and(|r| r.status == 201)
        }
    })
    .await
}
