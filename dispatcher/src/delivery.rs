//! Delivering one token batch: every token pushed concurrently (bounded),
//! retried with jittered exponential backoff honouring `Retry-After`,
//! paced by the optional rate cap, by the project's share of its quota
//! ([`crate::pacing`]) and by a process-wide pause whenever the provider
//! answers 429. Invalid tokens are never retried.
//!
//! The push of a notification is prepared once per target (notification and
//! environment) and cached, so the 1000th batch of a send costs no payload
//! building at all.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use clarion_proto::{
    ACCEPT_BUCKET_MS, AcceptBucket, ApnsEnvironment, BatchRefusal, DeliveryCounts, TokenBatch,
};
use clarion_runtime::amqp::control::Cancellations;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use rand::Rng;
use uuid::Uuid;

use crate::apps::AppChannels;
use crate::channel::{Attempt, PushChannel};
use crate::metrics;
use crate::pacing::{Pacer, Pacers};
use crate::push_health::PushHealth;

/// Prepared pushes kept: the notifications a dispatcher works on at once.
const PREPARED_CACHE: usize = 64;

/// How hard to try.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Pushes of one batch in flight at once.
    pub per_batch: usize,
    pub max_attempts: u32,
    /// A retryable push is retried until it had `max_attempts` attempts
    /// and this long has passed since its first.
    pub retry_window: Duration,
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// The longest `Retry-After` honoured.
    pub retry_after_max: Duration,
}

impl Limits {
    /// Full-jitter exponential backoff for attempt `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self
            .retry_base
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1).min(20)))
            .min(self.retry_max);
        let jitter: f64 = rand::rng().random_range(0.5..=1.0);
        ceiling.mul_f64(jitter)
    }

    /// How long to wait before attempt `attempt + 1` after an answer that
    /// named `after` (`Retry-After`), capped.
    pub fn delay(&self, attempt: u32, after: Option<Duration>) -> Duration {
        retry_delay(after, self.backoff(attempt), self.retry_after_max)
    }

    /// Whether a request that had `attempts` attempts, the first `elapsed`
    /// ago, may not wait `delay` for another: the attempts are spent and
    /// the retry window would be over by then.
    pub fn given_up(&self, attempts: u32, elapsed: Duration, delay: Duration) -> bool {
        attempts >= self.max_attempts && elapsed + delay >= self.retry_window
    }
}

/// What became of a batch.
#[derive(Debug, Clone, Default)]
pub struct BatchOutcome {
    pub counts: DeliveryCounts,
    pub accepts: Vec<AcceptBucket>,
    pub first_accept_at: Option<DateTime<Utc>>,
    pub last_accept_at: Option<DateTime<Utc>>,
    /// Tokens the provider says are gone.
    pub unregistered: Vec<String>,
    /// Tokens refused as malformed or foreign.
    pub invalid: Vec<String>,
    pub retries: u32,
    /// Why pushes failed, invalid or unregistered tokens aside (fixed labels).
    pub failures: BTreeMap<&'static str, u32>,
    /// Why none of the batch was pushed, when its app cannot be served here.
    pub refused: Option<BatchRefusal>,
}

/// The fate of one token.
enum Fate {
    Accepted(DateTime<Utc>),
    Unregistered,
    Invalid,
    Failed(&'static str),
    Cancelled,
}

pub struct Deliverer<C: PushChannel> {
    channels: AppChannels<C>,
    limits: Limits,
    rate: Option<DefaultDirectRateLimiter>,
    /// Each project's share of its quota (FCM).
    pacers: Pacers,
    pause: Pause,
    cancellations: Cancellations,
    prepared: Mutex<PreparedCache<C::Prepared>>,
    /// Told of every attempt, for `/readyz`.
    health: Arc<PushHealth>,
}

impl<C: PushChannel> Deliverer<C> {
    /// `rate_limit`: most pushes per second, 0 for none.
    pub fn new(
        channels: AppChannels<C>,
        limits: Limits,
        rate_limit: u32,
        pacers: Pacers,
        cancellations: Cancellations,
        health: Arc<PushHealth>,
    ) -> Self {
        Self {
            channels,
            limits,
            rate: NonZeroU32::new(rate_limit).map(|rate| {
                // A burst of a tenth of a second's worth keeps the pace smooth.
                let burst = NonZeroU32::new((rate.get() / 10).max(1)).unwrap_or(NonZeroU32::MIN);
                RateLimiter::direct(Quota::per_second(rate).allow_burst(burst))
            }),
            pacers,
            pause: Pause::new(),
            cancellations,
            prepared: Mutex::new(PreparedCache::default()),
            health,
        }
    }

    pub async fn deliver(&self, batch: &TokenBatch) -> BatchOutcome {
        let mut outcome = BatchOutcome::default();
        let tokens = batch.tokens.len() as u32;
        let id = batch.batch_id.notification_id;
        let expires_at = batch.sent_at + chrono::Duration::seconds(i64::from(batch.notification.ttl_seconds));
        // Nothing is pushed before the control log is read: a notification
        // cancelled while this process was down is known first.
        self.cancellations.up_to_date().await;
        if self.cancellations.is_cancelled(id) {
            outcome.counts.cancelled = tokens;
            return outcome;
        }
        if batch.notification.dry_run {
            outcome.counts.dry_run = tokens;
            return outcome;
        }
        if Utc::now() >= expires_at {
            outcome.counts.expired = tokens;
            return outcome;
        }
        if batch.notification.live_activity.is_some() && !C::LIVE_ACTIVITIES {
            tracing::error!(
                notification.id = %id,
                platform = %batch.platform,
                "a Live Activity start batch for a platform without Live Activities; its pushes count as failed"
            );
            outcome.counts.failed = tokens;
            outcome.failures.insert("live_activity_unsupported", tokens);
            return outcome;
        }
        let app = &batch.notification.app;
        let channel = match self.channels.get(app).await {
            Ok(channel) => channel,
            Err(err) => {
                tracing::error!(
                    notification.id = %id,
                    app,
                    platform = %batch.platform,
                    error = %err,
                    "batch refused: this dispatcher cannot serve its app; its pushes count as failed"
                );
                outcome.counts.failed = tokens;
                outcome.failures.insert(err.label(), tokens);
                outcome.refused = Some(err.refusal());
                return outcome;
            }
        };
        let prepared = match self.prepared(&channel, batch) {
            Ok(prepared) => prepared,
            Err(reason) => {
                tracing::error!(notification.id = %id, error = %reason, "cannot prepare the push");
                outcome.counts.failed = tokens;
                outcome.failures.insert("prepare", tokens);
                return outcome;
            }
        };

        let pacer = self.pacers.for_project(channel.quota_project());
        let limit = self.limits.per_batch.max(1);
        let mut tokens = batch.tokens.iter();
        let mut in_flight = FuturesUnordered::new();
        let mut accepts: BTreeMap<u32, u32> = BTreeMap::new();
        loop {
            while in_flight.len() < limit {
                match tokens.next() {
                    Some(token) => {
                        in_flight.push(self.push(&channel, token, batch, &prepared, pacer.as_deref()))
                    }
                    None => break,
                }
            }
            let Some((token, fate, retries)) = in_flight.next().await else {
                break;
            };
            outcome.retries += retries;
            match fate {
                Fate::Accepted(at) => {
                    outcome.counts.sent += 1;
                    outcome.first_accept_at = Some(outcome.first_accept_at.map_or(at, |first| first.min(at)));
                    outcome.last_accept_at = Some(outcome.last_accept_at.map_or(at, |last| last.max(at)));
                    let after = (at - batch.sent_at)
                        .num_milliseconds()
                        .clamp(0, i64::from(u32::MAX)) as u32;
                    *accepts
                        .entry(after / ACCEPT_BUCKET_MS * ACCEPT_BUCKET_MS)
                        .or_default() += 1;
                }
                Fate::Unregistered => {
                    outcome.counts.unregistered += 1;
                    outcome.unregistered.push(token.clone());
                }
                Fate::Invalid => {
                    outcome.counts.invalid += 1;
                    outcome.invalid.push(token.clone());
                }
                Fate::Failed(reason) => {
                    outcome.counts.failed += 1;
                    *outcome.failures.entry(reason).or_default() += 1;
                }
                Fate::Cancelled => outcome.counts.cancelled += 1,
            }
        }
        outcome.accepts = accepts
            .into_iter()
            .map(|(after_ms, count)| AcceptBucket { after_ms, count })
            .collect();
        outcome
    }

    /// One token, with retries; also returns how many retries it took.
    async fn push<'a>(
        &self,
        channel: &C,
        token: &'a String,
        batch: &TokenBatch,
        prepared: &C::Prepared,
        pacer: Option<&Pacer>,
    ) -> (&'a String, Fate, u32) {
        let (fate, retries) = self.attempts(channel, token, batch, prepared, pacer).await;
        (token, fate, retries)
    }

    async fn attempts(
        &self,
        channel: &C,
        token: &str,
        batch: &TokenBatch,
        prepared: &C::Prepared,
        pacer: Option<&Pacer>,
    ) -> (Fate, u32) {
        let id = batch.batch_id.notification_id;
        let mut retries = 0;
        let mut last_reason = "unknown";
        let started = Instant::now();
        // Bounded: past `max_attempts`, only while the retry window lasts
        // (the backoff keeps growing to `retry_max` meanwhile).
        for attempt in 1.. {
            if self.cancellations.is_cancelled(id) {
                return (Fate::Cancelled, retries);
            }
            self.pause.wait().await;
            if let Some(rate) = &self.rate {
                rate.until_ready().await;
            }
            if let Some(pacer) = pacer {
                pacer.ready().await;
            }
            // The waits above can be long (a quota pause): a cancel read
            // meanwhile must stop this push too.
            if self.cancellations.is_cancelled(id) {
                return (Fate::Cancelled, retries);
            }
            let attempted = channel.send(token, prepared).await;
            match attempted {
                Attempt::Retry { reason, .. } | Attempt::Reauthenticate(reason) => self.health.failed(reason),
                _ => self.health.succeeded(),
            }
            let (reason, after) = match attempted {
                Attempt::Accepted => return (Fate::Accepted(Utc::now()), retries),
                Attempt::Unregistered => return (Fate::Unregistered, retries),
                Attempt::Invalid(_) => return (Fate::Invalid, retries),
                Attempt::Failed(reason) => return (Fate::Failed(reason), retries),
                Attempt::Reauthenticate(reason) => {
                    channel.reauthenticate().await;
                    // Backing off: a renewal can fail (or be rate-limited),
                    // and retrying at once only burns the attempts.
                    (reason, Some(self.limits.backoff(attempt)))
                }
                Attempt::Retry {
                    reason,
                    after,
                    throttled,
                } => {
                    let delay = self.limits.delay(attempt, after);
                    if throttled {
                        // The provider asked us to slow down: everyone waits,
                        // and the quota's share is paced slower from now on.
                        self.pause.extend(delay);
                        if let Some(pacer) = pacer {
                            pacer.throttled();
                        }
                    }
                    (reason, Some(delay))
                }
            };
            last_reason = reason;
            if self
                .limits
                .given_up(attempt, started.elapsed(), after.unwrap_or_default())
            {
                break;
            }
            retries += 1;
            if let Some(delay) = after
                && !delay.is_zero()
            {
                tokio::time::sleep(delay).await;
            }
        }
        (Fate::Failed(last_reason), retries)
    }

    /// The app channels this deliverer pushes through (shared with the
    /// Live Activity channel commands, which use the same pools and
    /// provider tokens).
    pub fn channels(&self) -> &AppChannels<C> {
        &self.channels
    }

    /// How hard it tries.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn prepared(&self, channel: &C, batch: &TokenBatch) -> Result<Arc<C::Prepared>, C::Error> {
        if !C::PREPARED_PER_TARGET {
            metrics::payloads_prepared(batch.platform).increment(1);
            return channel.prepare(batch).map(Arc::new);
        }
        let target = Target {
            notification_id: batch.batch_id.notification_id,
            environment: batch.environment,
            locale: batch.locale.clone(),
        };
        if let Some(prepared) = lock(&self.prepared).get(&target) {
            return Ok(prepared);
        }
        let prepared = Arc::new(channel.prepare(batch)?);
        metrics::payloads_prepared(batch.platform).increment(1);
        lock(&self.prepared).insert(target, prepared.clone());
        Ok(prepared)
    }
}

/// A batch's target: its notification, environment and text (the default
/// or one localization). Batches are homogeneous per target, and a
/// prepared push carries its route, so one is prepared per target.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Target {
    notification_id: Uuid,
    environment: ApnsEnvironment,
    locale: Option<String>,
}

/// Prepared pushes by target, oldest forgotten first.
struct PreparedCache<P> {
    entries: HashMap<Target, Arc<P>>,
    order: VecDeque<Target>,
}

impl<P> Default for PreparedCache<P> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<P> PreparedCache<P> {
    fn get(&self, target: &Target) -> Option<Arc<P>> {
        self.entries.get(target).cloned()
    }

    fn insert(&mut self, target: Target, prepared: Arc<P>) {
        if self.entries.insert(target.clone(), prepared).is_none() {
            self.order.push_back(target);
        }
        while self.order.len() > PREPARED_CACHE {
            if let Some(oldest) = self.order.pop_front() {
                self.entries.remove(&oldest);
            }
        }
    }
}

/// How long to wait before the next attempt: the provider's `Retry-After`
/// (capped at `retry_after_max`, whatever it says) or our own backoff,
/// whichever is longer.
fn retry_delay(after: Option<Duration>, backoff: Duration, retry_after_max: Duration) -> Duration {
    after.unwrap_or_default().min(retry_after_max).max(backoff)
}

/// A process-wide pause after a 429: every push waits until it is over.
struct Pause {
    base: Instant,
    /// Milliseconds after `base` until which pushes wait.
    until_ms: AtomicU64,
}

impl Pause {
    fn new() -> Self {
        Self {
            base: Instant::now(),
            until_ms: AtomicU64::new(0),
        }
    }

    fn extend(&self, by: Duration) {
        let until = self.base.elapsed().saturating_add(by).as_millis();
        let until = u64::try_from(until).unwrap_or(u64::MAX);
        self.until_ms.fetch_max(until, Ordering::Relaxed);
    }

    async fn wait(&self) {
        let until = self.until_ms.load(Ordering::Relaxed);
        let now = self.base.elapsed().as_millis() as u64;
        if until > now {
            tokio::time::sleep(Duration::from_millis(until - now)).await;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_capped_and_never_shorter_than_the_backoff() {
        let cap = Duration::from_secs(60);
        let backoff = Duration::from_millis(300);
        assert_eq!(retry_delay(Some(Duration::from_secs(3600)), backoff, cap), cap);
        assert_eq!(retry_delay(Some(Duration::MAX), backoff, cap), cap);
        assert_eq!(
            retry_delay(Some(Duration::from_secs(2)), backoff, cap),
            Duration::from_secs(2)
        );
        assert_eq!(retry_delay(None, backoff, cap), backoff);
    }

    #[test]
    fn a_huge_pause_saturates_instead_of_panicking() {
        let pause = Pause::new();
        pause.extend(Duration::MAX);
        assert_eq!(pause.until_ms.load(Ordering::Relaxed), u64::MAX);
    }
}
