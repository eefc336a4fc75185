//! What the node-loss and failover tests share: a pipeline of small
//! batches (so a lost node or server catches many in flight), the bound on
//! duplicates that follows from it, and the count each test ends with, per
//! platform of its audience: every device delivered (the mock's distinct
//! tokens and their digest, so a push to a device outside the audience
//! shows), lost 0, duplicates within what was in flight, each batch
//! reported once. The figures go into the test's own JSON for its output.

use serde_json::{Value, json};

use super::{ClusterOptions, ClusterServers, Device, Mocks, platforms_of};
use crate::mocks::digest;

/// Tokens per harvest job.
pub const TOKENS_PER_JOB: u64 = 100;
/// Tokens per batch.
pub const BATCH_SIZE: u64 = 25;
/// A harvester's workers.
pub const HARVEST_WORKERS: u64 = 2;
/// Batches a harvest worker may have published unconfirmed.
pub const PUBLISH_WINDOW: u64 = 2;
/// Batches a dispatcher works on at once (each unacked until reported).
pub const DISPATCH_WORKERS: u64 = 2;
/// Per platform, in tokens: the batches a harvester may have published
/// unconfirmed plus those a dispatcher holds unacked — what one lost node
/// or server can make the pipeline do twice.
pub const IN_FLIGHT: u64 = (HARVEST_WORKERS * PUBLISH_WINDOW + DISPATCH_WORKERS) * BATCH_SIZE;

/// One harvester and the dispatchers on `servers`, with the small batches
/// above; each dispatcher batch in five streams.
pub fn small_batch_options(servers: ClusterServers) -> ClusterOptions {
    ClusterOptions {
        coordinator: vec![format!("--tokens-per-job={TOKENS_PER_JOB}")],
        harvester: vec![
            format!("--harvest-workers={HARVEST_WORKERS}"),
            format!("--harvest-publish-window={PUBLISH_WINDOW}"),
            format!("--batch-size={BATCH_SIZE}"),
        ],
        harvesters: 1,
        dispatcher: vec![
            format!("--dispatch-batch-workers={DISPATCH_WORKERS}"),
            "--dispatch-streams-per-batch=5".into(),
        ],
        dispatchers: true,
        servers: Some(servers),
        receipts: None,
    }
}

/// Asserts the count above for `devices` against what `mocks` received and
/// what the notification's `status` reports, writing each platform's
/// devices, delivered, duplicates and lost into `figures`.
pub fn assert_every_device_once(
    devices: &[Device],
    mocks: &Mocks,
    status: &Value,
    duplicate_bound: u64,
    figures: &mut Value,
) {
    for platform in platforms_of(devices) {
        let expected: Vec<&str> = devices
            .iter()
            .filter(|d| d.platform == platform)
            .map(|d| d.token.as_str())
            .collect();
        let stats = mocks.state(platform).stats();
        figures[platform.as_str()] = json!({
            "devices": expected.len(),
            "delivered": stats.unique_tokens,
            "duplicates": stats.duplicate_pushes,
            "lost": (expected.len() as u64).saturating_sub(stats.unique_tokens),
        });
        assert_eq!(
            stats.unique_tokens,
            expected.len() as u64,
            "{platform}: every device, lost 0: {figures}"
        );
        assert_eq!(
            stats.digest,
            digest(expected.iter().copied()),
            "{platform}: the very devices, no other"
        );
        assert!(
            stats.duplicate_pushes <= duplicate_bound,
            "{platform}: duplicates within what was in flight ({duplicate_bound}): {figures}"
        );
        let sent = status["delivery"][platform.as_str()]["sent"].as_u64();
        assert_eq!(
            sent,
            Some(expected.len() as u64),
            "{platform}: each report counted once: {status}"
        );
    }
}
