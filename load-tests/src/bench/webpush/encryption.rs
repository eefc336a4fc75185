//! The cost the web dispatcher is held to: encrypting one message (RFC
//! 8291), read from the criterion benchmark's last run
//! (`dispatcher/benches/webpush_encryption.rs`, `webpush_cpu/per_message`)
//! and measured again here, in the same run, with the same code (the
//! subscription's key and auth secret decoded, then the dispatcher's
//! `webpush::encrypt`) on one thread's CPU clock.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clarion_dispatcher::webpush::encrypt::encrypt;
use clarion_proto::{WebSubscription, WebSubscriptionKeys};
use serde::Serialize;

use crate::mocks::WebPushMock;

/// Most messages the same-run measure encrypts, and for how long at most.
const ITERATIONS: u64 = 20_000;
const MAX_TIME: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Serialize)]
pub struct EncryptionCost {
    /// criterion's mean CPU time per message, when it has run (`cargo
    /// bench -p clarion-dispatcher --bench webpush_encryption`).
    pub criterion_cpu_us_per_message: Option<f64>,
    /// Where it was read from.
    pub criterion_file: PathBuf,
    /// The same work measured here, one thread, same run.
    pub same_run_cpu_us_per_message: f64,
    pub same_run_messages: u64,
}

impl EncryptionCost {
    /// The figure to compare with: criterion's when there is one.
    pub fn reference_us(&self) -> f64 {
        self.criterion_cpu_us_per_message
            .unwrap_or(self.same_run_cpu_us_per_message)
    }
}

/// criterion's estimates under the target directory the bench was built
/// in (`target/release/clarion-bench` → `target/criterion`).
pub fn default_criterion_file() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("criterion")))
        .unwrap_or_else(|| PathBuf::from("target/criterion"))
        .join("webpush_cpu/per_message/new/estimates.json")
}

pub async fn measure(mock: &WebPushMock, criterion_file: &Path) -> Result<EncryptionCost> {
    let subscription = mock.seeded_subscription("webpushencryption01")?;
    let subscription = WebSubscription {
        endpoint: subscription.endpoint,
        keys: WebSubscriptionKeys {
            p256dh: subscription.p256dh,
            auth: subscription.auth,
        },
    };
    let (cpu, messages) = tokio::task::spawn_blocking(move || encrypt_for_a_while(&subscription)).await??;
    Ok(EncryptionCost {
        criterion_cpu_us_per_message: read_criterion(criterion_file),
        criterion_file: criterion_file.to_owned(),
        same_run_cpu_us_per_message: cpu.as_secs_f64() * 1e6 / messages.max(1) as f64,
        same_run_messages: messages,
    })
}

fn encrypt_for_a_while(subscription: &WebSubscription) -> Result<(Duration, u64)> {
    let plaintext = serde_json::json!({
        "title": "Benchmark", "body": "dispatcher alone",
        "notification_id": crate::bench::ceiling::CEILING_NOTIFICATION_ID,
    })
    .to_string()
    .into_bytes();
    let started = Instant::now();
    let before = thread_cpu();
    let mut messages = 0;
    while messages < ITERATIONS && started.elapsed() < MAX_TIME {
        let subscription = std::hint::black_box(subscription);
        let key = subscription.public_key().context("the seeded key is on P-256")?;
        let auth = subscription.auth_secret().context("the seeded auth secret")?;
        let body = encrypt(&plaintext, &key, &auth).context("encrypting")?;
        std::hint::black_box(body);
        messages += 1;
    }
    Ok((thread_cpu().saturating_sub(before), messages))
}

/// This thread's CPU time so far (the scheduler's count).
fn thread_cpu() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    Duration::from_nanos(
        text.split_whitespace()
            .next()
            .and_then(|field| field.parse().ok())
            .unwrap_or(0),
    )
}

/// criterion's mean (nanoseconds per iteration) as microseconds.
fn read_criterion(file: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(file).ok()?;
    parse_estimates(&text)
}

fn parse_estimates(text: &str) -> Option<f64> {
    let estimates: serde_json::Value = serde_json::from_str(text).ok()?;
    estimates["mean"]["point_estimate"].as_f64().map(|ns| ns / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::parse_estimates;

    #[test]
    fn criterions_mean_is_read_in_microseconds() {
        let text = r#"{"mean":{"confidence_interval":{"confidence_level":0.95,"lower_bound":1.0,"upper_bound":2.0},
                       "point_estimate":187654.3,"standard_error":10.0},"median":{"point_estimate":1.0}}"#;
        let us = parse_estimates(text).expect("a mean");
        assert!((us - 187.6543).abs() < 1e-9, "{us}");
        assert_eq!(parse_estimates("{}"), None);
    }
}
