//! What a mock does wrong on purpose: tokens it reports dead, invalid or
//! foreign; random errors per status; added latency; a throttle and a
//! per-minute quota. Changed at run time through the control API.

use std::collections::{BTreeMap, HashSet};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use serde::{Deserialize, Serialize};

/// The fault settings, as sent to `PUT /faults`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultConfig {
    /// Tokens the provider says are gone (APNs 410 `Unregistered`, FCM `UNREGISTERED`).
    pub dead: Vec<String>,
    /// Token prefixes treated as dead (for audiences too large to list).
    pub dead_prefixes: Vec<String>,
    /// Tokens refused as malformed (APNs `BadDeviceToken`, FCM `INVALID_ARGUMENT`).
    pub invalid: Vec<String>,
    /// Token prefixes treated as invalid.
    pub invalid_prefixes: Vec<String>,
    /// Tokens of another app or project (APNs `DeviceTokenNotForTopic`, FCM `SENDER_ID_MISMATCH`).
    pub foreign: Vec<String>,
    /// Share (0..1) of otherwise good requests answered with each status.
    pub error_rates: BTreeMap<u16, f64>,
    /// Added to every answer, in milliseconds.
    pub latency_ms: f64,
    /// Uniform random extra latency up to this, in milliseconds.
    pub jitter_ms: f64,
    /// Requests per second served before answering 429 for the rest of the second.
    pub throttle_per_s: Option<u64>,
    /// Requests per minute served before answering 429 until the minute ends.
    pub quota_per_minute: Option<u64>,
    /// `Retry-After` sent with 429 and 503 answers, in seconds.
    pub retry_after_s: Option<u64>,
    /// Answer every request with this status and an HTML page, as a web
    /// server that is not APNs / FCM would (an endpoint pointed at the
    /// wrong host): no provider's word on any token.
    pub impostor_status: Option<u16>,
}

/// What the faults say about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Serve,
    Dead,
    Invalid,
    Foreign,
    /// Over the throttle or quota; retry after this many seconds.
    Limited {
        retry_after_s: u64,
    },
    /// A random injected error with this status.
    Error(u16),
}

/// Compiled fault settings plus the throttle and quota windows.
pub struct Faults {
    config: RwLock<Compiled>,
    base: Instant,
    second: Window,
    minute: Window,
}

struct Compiled {
    source: FaultConfig,
    dead: HashSet<String>,
    invalid: HashSet<String>,
    foreign: HashSet<String>,
}

/// A fixed counting window (a second or a minute).
struct Window {
    index: AtomicU64,
    count: AtomicU64,
}

impl Window {
    fn new() -> Self {
        Self {
            index: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Counts one request in window `index`; returns the count so far.
    fn hit(&self, index: u64) -> u64 {
        if self.index.swap(index, Ordering::Relaxed) != index {
            self.count.store(0, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed) + 1
    }
}

impl Default for Faults {
    fn default() -> Self {
        Self::new()
    }
}

impl Faults {
    pub fn new() -> Self {
        Self {
            config: RwLock::new(compile(FaultConfig::default())),
            base: Instant::now(),
            second: Window::new(),
            minute: Window::new(),
        }
    }

    pub fn set(&self, config: FaultConfig) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = compile(config);
    }

    pub fn get(&self) -> FaultConfig {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .source
            .clone()
    }

    /// The status every request is answered with as an impostor, if set.
    pub fn impostor_status(&self) -> Option<u16> {
        self.get_source(|c| c.impostor_status)
    }

    /// `Retry-After` for 429 / 503 answers.
    pub fn retry_after_s(&self) -> u64 {
        self.get_source(|c| c.retry_after_s.unwrap_or(1))
    }

    /// The latency to add to this answer.
    pub fn latency(&self) -> Duration {
        let (fixed, jitter) = self.get_source(|c| (c.latency_ms, c.jitter_ms));
        let jitter = if jitter > 0.0 {
            rand::rng().random_range(0.0..jitter)
        } else {
            0.0
        };
        Duration::from_secs_f64(((fixed + jitter) / 1000.0).max(0.0))
    }

    /// Waits out the configured latency (no timer at all when there is none).
    pub async fn delay(&self) {
        let latency = self.latency();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }

    /// Decides the fate of a request for `token`.
    pub fn judge(&self, token: &str) -> Verdict {
        let config = self.config.read().unwrap_or_else(|p| p.into_inner());
        let source = &config.source;
        if config.dead.contains(token) || source.dead_prefixes.iter().any(|p| token.starts_with(p.as_str())) {
            return Verdict::Dead;
        }
        if config.invalid.contains(token)
            || source
                .invalid_prefixes
                .iter()
                .any(|p| token.starts_with(p.as_str()))
        {
            return Verdict::Invalid;
        }
        if config.foreign.contains(token) {
            return Verdict::Foreign;
        }
        let elapsed = self.base.elapsed();
        if let Some(limit) = source.throttle_per_s {
            let second = elapsed.as_secs();
            if self.second.hit(second) > limit {
                return Verdict::Limited {
                    retry_after_s: source.retry_after_s.unwrap_or(1),
                };
            }
        }
        if let Some(limit) = source.quota_per_minute {
            let minute = elapsed.as_secs() / 60;
            if self.minute.hit(minute) > limit {
                let left = 60 - elapsed.as_secs() % 60;
                return Verdict::Limited { retry_after_s: left };
            }
        }
        if !source.error_rates.is_empty() {
            let roll: f64 = rand::rng().random();
            let mut threshold = 0.0;
            for (status, rate) in &source.error_rates {
                threshold += rate;
                if roll < threshold {
                    return Verdict::Error(*status);
                }
            }
        }
        Verdict::Serve
    }

    fn get_source<T>(&self, read: impl FnOnce(&FaultConfig) -> T) -> T {
        read(&self.config.read().unwrap_or_else(|p| p.into_inner()).source)
    }
}

fn compile(source: FaultConfig) -> Compiled {
    Compiled {
        dead: source.dead.iter().cloned().collect(),
        invalid: source.invalid.iter().cloned().collect(),
        foreign: source.foreign.iter().cloned().collect(),
        source,
    }
}

/// What a web server that is not the provider answers: `status` with an
/// HTML page.
pub fn impostor_page(status: u16) -> http::Response<bytes::Bytes> {
    let page = format!(
        "<!DOCTYPE html><html><head><title>{status}</title></head><body><h1>{status}</h1></body></html>"
    );
    http::Response::builder()
        .status(status)
        .header("content-type", "text/html; charset=utf-8")
        .body(bytes::Bytes::from(page))
        .unwrap_or_else(|_| http::Response::new(bytes::Bytes::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_lists_prefixes_and_rates_decide() {
        let faults = Faults::new();
        assert_eq!(faults.judge("anything"), Verdict::Serve);
        faults.set(FaultConfig {
            dead: vec!["d1".into()],
            dead_prefixes: vec!["dead".into()],
            invalid: vec!["i1".into()],
            foreign: vec!["f1".into()],
            error_rates: BTreeMap::from([(503, 1.0)]),
            ..FaultConfig::default()
        });
        assert_eq!(faults.judge("d1"), Verdict::Dead);
        assert_eq!(faults.judge("deadbeef"), Verdict::Dead);
        assert_eq!(faults.judge("i1"), Verdict::Invalid);
        assert_eq!(faults.judge("f1"), Verdict::Foreign);
        assert_eq!(faults.judge("ok"), Verdict::Error(503));
    }

    #[test]
    fn the_throttle_limits_each_second() {
        let faults = Faults::new();
        faults.set(FaultConfig {
            throttle_per_s: Some(3),
            retry_after_s: Some(2),
            ..FaultConfig::default()
        });
        let verdicts: Vec<Verdict> = (0..5).map(|_| faults.judge("t")).collect();
        assert_eq!(&verdicts[..3], &[Verdict::Serve; 3]);
        assert_eq!(verdicts[3], Verdict::Limited { retry_after_s: 2 });
    }
}
