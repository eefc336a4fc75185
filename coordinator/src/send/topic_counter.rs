//! The topic counter: per-topic subscriber counts, cached so that neither the
//! topics API nor notification planning counts rows on the hot path.
//!
//! - A request answered from the cache when the entry is young enough for it.
//! - Otherwise one lookup runs per topic; concurrent requests for the same
//!   topic wait for that one lookup instead of starting their own.
//! - Topics asked for recently are refreshed on a schedule, so busy topics
//!   are nearly always warm; a topic whose count is slow (millions of
//!   subscribers) is refreshed less often, in proportion to what its count
//!   costs, so keeping it warm never becomes a load of its own.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use actix::prelude::*;
use clarion_runtime::PgPool;
use tokio::sync::oneshot;
use tracing::{debug, warn};

use crate::store::registrations::DEFAULT_APP;
use crate::store::topics::{TopicCounts, count};

/// Mailbox bound: one message per API request or planned notification; 256
/// queued requests is far more than a healthy coordinator ever holds, and a
/// full mailbox makes callers wait (`send().await`) instead of piling up.
const MAILBOX_CAPACITY: usize = 256;
/// Most topics kept in the cache; beyond it the least recently used goes.
const MAX_CACHED_TOPICS: usize = 10_000;
/// A topic not asked for in this long is no longer refreshed on schedule.
const KEEP_WARM_FOR: Duration = Duration::from_secs(600);
/// A scheduled refresh waits at least this many times as long as the last
/// count of its topic took (from asking for a connection to the answer):
/// one topic's scheduled counts run at most 1% of the time, on however
/// many processes PostgreSQL gives a count (a 10M-subscriber topic counted
/// in 1.5 s is refreshed every 150 s, not every few seconds in the middle
/// of its own send) — but never less often than [`LONGEST_REFRESH`].
const REFRESH_COST_RATIO: u32 = 100;
/// The longest a warm topic goes without a scheduled count, however slow
/// its last one was (one slow count on a busy database must not leave a
/// count to plan with from many minutes ago).
const LONGEST_REFRESH: Duration = Duration::from_secs(300);

/// Why no count could be produced.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CountError {
    #[error("counting subscribers failed: {0}")]
    Database(String),
    #[error("the topic counter stopped")]
    Stopped,
}

/// Subscriber counts of `topic`, no older than `max_age`.
#[derive(Message)]
#[rtype(result = "Result<TopicCounts, CountError>")]
pub struct GetTopicCounts {
    pub topic: String,
    pub max_age: Duration,
}

/// Whatever counts are cached for `topics`, of any age (`None` for a topic
/// never counted); a lookup is started for each missing one. Never waits
/// for the database: this is what notification planning uses.
#[derive(Message)]
#[rtype(result = "Vec<Option<TopicCounts>>")]
pub struct PeekTopicCounts {
    pub topics: Vec<String>,
}

struct CachedCounts {
    counts: TopicCounts,
    fetched_at: Instant,
    last_asked: Instant,
    /// How long the count took, from its start to its answer.
    took: Duration,
}

impl CachedCounts {
    /// When the schedule re-counts this topic: `refresh_every` after the
    /// last count, or later when counting it is expensive.
    fn refresh_due(&self, refresh_every: Duration) -> bool {
        let wait = (self.took * REFRESH_COST_RATIO).min(LONGEST_REFRESH);
        self.fetched_at.elapsed() >= refresh_every.max(wait)
    }
}

type Waiter = oneshot::Sender<Result<TopicCounts, CountError>>;

pub struct TopicCounter {
    pool: PgPool,
    refresh_every: Duration,
    cache: HashMap<String, CachedCounts>,
    in_flight: HashMap<String, Vec<Waiter>>,
}

impl TopicCounter {
    /// `refresh_every`: how often recently asked topics are re-counted.
    pub fn new(pool: PgPool, refresh_every: Duration) -> Self {
        Self {
            pool,
            refresh_every: refresh_every.max(Duration::from_secs(1)),
            cache: HashMap::new(),
            in_flight: HashMap::new(),
        }
    }

    /// Starts one lookup for `topic`; its result goes to every waiter.
    fn start_lookup(&mut self, topic: String, ctx: &mut Context<Self>) {
        let pool = self.pool.clone();
        let query_topic = topic.clone();
        let started = Instant::now();
        let lookup = async move { count(&pool, DEFAULT_APP, &query_topic).await };
        ctx.spawn(lookup.into_actor(self).map(move |result, counter, _ctx| {
            let result = result.map_err(|err| CountError::Database(err.to_string()));
            match &result {
                Ok(counts) => counter.store(topic.clone(), *counts, started.elapsed()),
                Err(err) => warn!(%topic, error = %err, "topic count failed"),
            }
            for waiter in counter.in_flight.remove(&topic).unwrap_or_default() {
                let _ = waiter.send(result.clone());
            }
        }));
    }

    fn store(&mut self, topic: String, counts: TopicCounts, took: Duration) {
        let now = Instant::now();
        if !self.cache.contains_key(&topic) && self.cache.len() >= MAX_CACHED_TOPICS {
            self.evict_least_recently_asked();
        }
        let entry = self.cache.entry(topic).or_insert(CachedCounts {
            counts,
            fetched_at: now,
            last_asked: now,
            took,
        });
        entry.counts = counts;
        entry.fetched_at = now;
        entry.took = took;
    }

    fn evict_least_recently_asked(&mut self) {
        let oldest = self
            .cache
            .iter()
            .min_by_key(|(_, entry)| entry.last_asked)
            .map(|(topic, _)| topic.clone());
        if let Some(topic) = oldest {
            self.cache.remove(&topic);
        }
    }

    fn refresh_warm_topics(&mut self, ctx: &mut Context<Self>) {
        self.cache
            .retain(|_, entry| entry.last_asked.elapsed() < KEEP_WARM_FOR);
        let due: Vec<String> = self
            .cache
            .iter()
            .filter(|(topic, entry)| {
                entry.refresh_due(self.refresh_every) && !self.in_flight.contains_key(*topic)
            })
            .map(|(topic, _)| topic.clone())
            .collect();
        debug!(topics = due.len(), "refreshing topic counts");
        for topic in due {
            self.in_flight.insert(topic.clone(), Vec::new());
            self.start_lookup(topic, ctx);
        }
    }
}

impl Actor for TopicCounter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        ctx.run_interval(self.refresh_every, |counter, ctx| {
            counter.refresh_warm_topics(ctx)
        });
    }
}

impl Handler<GetTopicCounts> for TopicCounter {
    type Result = ResponseFuture<Result<TopicCounts, CountError>>;

    fn handle(&mut self, msg: GetTopicCounts, ctx: &mut Self::Context) -> Self::Result {
        if let Some(entry) = self.cache.get_mut(&msg.topic) {
            entry.last_asked = Instant::now();
            if entry.fetched_at.elapsed() <= msg.max_age {
                let counts = entry.counts;
                return Box::pin(async move { Ok(counts) });
            }
        }
        let (tx, rx) = oneshot::channel();
        let lookup_running = self.in_flight.contains_key(&msg.topic);
        self.in_flight.entry(msg.topic.clone()).or_default().push(tx);
        if !lookup_running {
            self.start_lookup(msg.topic, ctx);
        }
        Box::pin(async move { rx.await.unwrap_or(Err(CountError::Stopped)) })
    }
}

impl Handler<PeekTopicCounts> for TopicCounter {
    type Result = MessageResult<PeekTopicCounts>;

    fn handle(&mut self, msg: PeekTopicCounts, ctx: &mut Self::Context) -> Self::Result {
        let counts = msg
            .topics
            .into_iter()
            .map(|topic| {
                if let Some(entry) = self.cache.get_mut(&topic) {
                    entry.last_asked = Instant::now();
                    return Some(entry.counts);
                }
                if !self.in_flight.contains_key(&topic) {
                    self.in_flight.insert(topic.clone(), Vec::new());
                    self.start_lookup(topic, ctx);
                }
                None
            })
            .collect();
        MessageResult(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(ago: Duration, took: Duration) -> CachedCounts {
        let fetched_at = Instant::now()
            .checked_sub(ago)
            .expect("the clock has run this long");
        CachedCounts {
            counts: TopicCounts::default(),
            fetched_at,
            last_asked: fetched_at,
            took,
        }
    }

    #[test]
    fn a_cheap_count_is_refreshed_on_the_schedule() {
        let every = Duration::from_secs(5);
        assert!(counted(Duration::from_secs(6), Duration::from_millis(2)).refresh_due(every));
        assert!(!counted(Duration::from_secs(4), Duration::from_millis(2)).refresh_due(every));
    }

    #[test]
    fn an_expensive_count_waits_in_proportion_to_its_cost() {
        let every = Duration::from_secs(5);
        let took = Duration::from_millis(1500);
        assert!(!counted(Duration::from_secs(6), took).refresh_due(every));
        assert!(!counted(Duration::from_secs(149), took).refresh_due(every));
        assert!(counted(Duration::from_secs(151), took).refresh_due(every));
    }

    #[test]
    fn even_a_very_slow_count_is_refreshed_within_five_minutes() {
        let every = Duration::from_secs(5);
        let took = Duration::from_secs(10);
        assert!(!counted(Duration::from_secs(299), took).refresh_due(every));
        assert!(counted(Duration::from_secs(301), took).refresh_due(every));
    }
}
