//! What a mock saw: per token, how often it was pushed (accepted) and when
//! first; totals by status; a latency histogram. Sharded by token so two
//! server threads rarely wait on each other.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use xxhash_rust::xxh3::xxh3_64;

use super::unix_ms;

const SHARDS: usize = 64;
/// Duplicated tokens listed in the stats, at most (the count is exact).
const MAX_LISTED_DUPLICATES: usize = 1000;
/// Highest HTTP status tracked.
const STATUSES: usize = 600;

struct Shard {
    /// Token hash → (accepted pushes, first accept in ms since `base`).
    tokens: HashMap<u64, (u32, u32), BuildHasherDefault<KeyIsHash>>,
    duplicates: Vec<String>,
    latency_us: Histogram<u64>,
}

pub struct Accounting {
    shards: Vec<Mutex<Shard>>,
    by_status: Vec<AtomicU64>,
    /// Monotonic clock base of the millisecond offsets below.
    base: Instant,
    /// When counting (re)started: ms since `base`, and Unix ms.
    epoch_ms: AtomicU64,
    epoch_unix_ms: AtomicU64,
    /// Latest accept, in ms since the epoch.
    last_accept_ms: AtomicU64,
    /// Accepted pushes and distinct accepted tokens, kept as they happen so
    /// a benchmark can poll them cheaply whatever the audience size.
    accepted_total: AtomicU64,
    unique_total: AtomicU64,
}

/// The two counters a benchmark polls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub accepted: u64,
    pub unique_tokens: u64,
}

/// A snapshot of the counters.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Stats {
    /// Requests answered 2xx (200 by APNs and FCM, 201 by push services).
    pub accepted: u64,
    /// Distinct tokens accepted at least once.
    pub unique_tokens: u64,
    /// Accepted pushes beyond the first for their token.
    pub duplicate_pushes: u64,
    /// Some of the tokens accepted more than once.
    pub duplicates: Vec<String>,
    /// Order-independent digest of the distinct accepted tokens: the wrapping
    /// sum of their XXH3-64 hashes (compare with [`digest`] of the expected set).
    pub digest: u64,
    /// Requests per HTTP status.
    pub by_status: BTreeMap<u16, u64>,
    pub latency: LatencySummary,
    /// Unix time of the first and the last accepted push, in milliseconds.
    pub first_accept_unix_ms: Option<u64>,
    pub last_accept_unix_ms: Option<u64>,
    /// What the phones behind the mock reported (receipts on only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipts: Option<super::phones::ReceiptStats>,
}

/// Time from a request's arrival to its answer, injected latency included.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// Per-token counts answered by the control API.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct TokenCount {
    pub token: String,
    pub count: u32,
    pub first_push_unix_ms: Option<u64>,
}

/// The digest of a set of tokens, as [`Stats::digest`] computes it.
pub fn digest<'a>(tokens: impl IntoIterator<Item = &'a str>) -> u64 {
    tokens
        .into_iter()
        .fold(0u64, |sum, token| sum.wrapping_add(xxh3_64(token.as_bytes())))
}

impl Default for Accounting {
    fn default() -> Self {
        Self::new()
    }
}

impl Accounting {
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(new_shard())).collect(),
            by_status: (0..STATUSES).map(|_| AtomicU64::new(0)).collect(),
            base: Instant::now(),
            epoch_ms: AtomicU64::new(0),
            epoch_unix_ms: AtomicU64::new(unix_ms()),
            last_accept_ms: AtomicU64::new(0),
            accepted_total: AtomicU64::new(0),
            unique_total: AtomicU64::new(0),
        }
    }

    /// Accepted pushes and distinct tokens so far, without a scan.
    pub fn counters(&self) -> Counters {
        Counters {
            accepted: self.accepted_total.load(Ordering::Relaxed),
            unique_tokens: self.unique_total.load(Ordering::Relaxed),
        }
    }

    /// Records one answered request.
    pub fn record(&self, token: &str, status: u16, latency: Duration) {
        if let Some(counter) = self.by_status.get(usize::from(status)) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let hash = xxh3_64(token.as_bytes());
        let mut shard = lock(&self.shards[(hash % SHARDS as u64) as usize]);
        let _ = shard
            .latency_us
            .record(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX).max(1));
        if (200..300).contains(&status) {
            let since_epoch = self.since_epoch_ms();
            let entry = shard.tokens.entry(hash).or_insert((0, since_epoch));
            entry.0 += 1;
            self.accepted_total.fetch_add(1, Ordering::Relaxed);
            if entry.0 == 1 {
                self.unique_total.fetch_add(1, Ordering::Relaxed);
            }
            if entry.0 == 2 && shard.duplicates.len() < MAX_LISTED_DUPLICATES / SHARDS + 1 {
                shard.duplicates.push(token.to_owned());
            }
        }
    }

    pub fn stats(&self) -> Stats {
        let epoch_unix_ms = self.epoch_unix_ms();
        let mut stats = Stats {
            accepted: 0,
            unique_tokens: 0,
            duplicate_pushes: 0,
            duplicates: Vec::new(),
            digest: 0,
            by_status: BTreeMap::new(),
            latency: LatencySummary::default(),
            first_accept_unix_ms: None,
            last_accept_unix_ms: None,
            receipts: None,
        };
        let mut latency = Histogram::<u64>::new(3).expect("3 significant digits is valid");
        let mut first: Option<u32> = None;
        for shard in &self.shards {
            let shard = lock(shard);
            let _ = latency.add(&shard.latency_us);
            for (hash, (count, first_ms)) in &shard.tokens {
                stats.accepted += u64::from(*count);
                stats.unique_tokens += 1;
                stats.duplicate_pushes += u64::from(count - 1);
                stats.digest = stats.digest.wrapping_add(*hash);
                first = Some(first.map_or(*first_ms, |f| f.min(*first_ms)));
            }
            stats.duplicates.extend(shard.duplicates.iter().cloned());
        }
        for (status, counter) in self.by_status.iter().enumerate() {
            let n = counter.load(Ordering::Relaxed);
            if n > 0 {
                stats.by_status.insert(status as u16, n);
            }
        }
        stats.latency = LatencySummary {
            count: latency.len(),
            p50_us: latency.value_at_quantile(0.5),
            p90_us: latency.value_at_quantile(0.9),
            p99_us: latency.value_at_quantile(0.99),
            max_us: latency.max(),
        };
        stats.first_accept_unix_ms = first.map(|ms| epoch_unix_ms + u64::from(ms));
        stats.last_accept_unix_ms = self.last_accept_unix_ms(epoch_unix_ms, stats.accepted);
        stats
    }

    /// How often each of `tokens` was accepted, and when first.
    pub fn lookup(&self, tokens: &[String]) -> Vec<TokenCount> {
        let epoch_unix_ms = self.epoch_unix_ms();
        tokens
            .iter()
            .map(|token| {
                let hash = xxh3_64(token.as_bytes());
                let shard = lock(&self.shards[(hash % SHARDS as u64) as usize]);
                let (count, first) = shard.tokens.get(&hash).copied().unwrap_or((0, 0));
                TokenCount {
                    token: token.clone(),
                    count,
                    first_push_unix_ms: (count > 0).then(|| epoch_unix_ms + u64::from(first)),
                }
            })
            .collect()
    }

    /// Forgets everything seen so far.
    pub fn reset(&self) {
        for shard in &self.shards {
            *lock(shard) = new_shard();
        }
        for counter in &self.by_status {
            counter.store(0, Ordering::Relaxed);
        }
        self.epoch_ms
            .store(self.base.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.epoch_unix_ms.store(unix_ms(), Ordering::Relaxed);
        self.last_accept_ms.store(0, Ordering::Relaxed);
        self.accepted_total.store(0, Ordering::Relaxed);
        self.unique_total.store(0, Ordering::Relaxed);
    }

    fn since_epoch_ms(&self) -> u32 {
        let now = self.base.elapsed().as_millis() as u64;
        let ms = now.saturating_sub(self.epoch_ms.load(Ordering::Relaxed));
        self.last_accept_ms.fetch_max(ms, Ordering::Relaxed);
        u32::try_from(ms).unwrap_or(u32::MAX)
    }

    fn epoch_unix_ms(&self) -> u64 {
        self.epoch_unix_ms.load(Ordering::Relaxed)
    }

    fn last_accept_unix_ms(&self, epoch_unix_ms: u64, accepted: u64) -> Option<u64> {
        (accepted > 0).then(|| epoch_unix_ms + self.last_accept_ms.load(Ordering::Relaxed))
    }
}

/// Hashes a key that is an XXH3 hash already by taking it as it is (its
/// low bits, which chose the shard, rotated away), instead of SipHashing
/// it again for every push.
#[derive(Default)]
struct KeyIsHash(u64);

impl Hasher for KeyIsHash {
    fn finish(&self) -> u64 {
        self.0.rotate_right(32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

fn new_shard() -> Shard {
    Shard {
        tokens: HashMap::default(),
        duplicates: Vec::new(),
        latency_us: Histogram::new(3).expect("3 significant digits is valid"),
    }
}

/// A poisoned lock only means another request panicked; the counters are
/// still usable.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_tokens_duplicates_and_statuses() {
        let accounting = Accounting::new();
        for token in ["a", "b", "a", "c"] {
            accounting.record(token, 200, Duration::from_micros(100));
        }
        accounting.record("d", 410, Duration::from_micros(50));
        let stats = accounting.stats();
        assert_eq!(
            accounting.counters(),
            Counters {
                accepted: 4,
                unique_tokens: 3
            }
        );
        assert_eq!(stats.accepted, 4);
        assert_eq!(stats.unique_tokens, 3);
        assert_eq!(stats.duplicate_pushes, 1);
        assert_eq!(stats.duplicates, vec!["a".to_string()]);
        assert_eq!(stats.digest, digest(["a", "b", "c"]));
        assert_eq!(stats.by_status, BTreeMap::from([(200, 4), (410, 1)]));
        assert_eq!(stats.latency.count, 5);
        let counts = accounting.lookup(&["a".into(), "d".into()]);
        assert_eq!((counts[0].count, counts[1].count), (2, 0));
        assert!(counts[0].first_push_unix_ms.is_some() && counts[1].first_push_unix_ms.is_none());
        accounting.reset();
        assert_eq!(accounting.stats().accepted, 0);
    }
}
