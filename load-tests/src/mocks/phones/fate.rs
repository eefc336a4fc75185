//! What one phone does with one push: whether it reports at all, after how
//! long it says `received`, and whether (and how much later) its reader
//! opens it. Drawn from the seed, the notification id and the token alone,
//! so the same run gives every phone the same fate whatever order the
//! pushes arrive in and however the mock's threads interleave.

use std::time::Duration;

use anyhow::{Context, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal};
use uuid::Uuid;
use xxhash_rust::xxh3::Xxh3;

use super::config::{DelayDistribution, ReceiptsConfig};

/// One phone's reports of one push.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fate {
    /// Offline, or later than the cut-off: it never reports.
    Silent,
    /// `received` this long after the push was accepted; then `opened`
    /// this long after `received`, when the reader opens it.
    Reports {
        received_after: Duration,
        opened_after: Option<Duration>,
    },
}

/// The distributions of [`ReceiptsConfig`], ready to draw from.
pub struct Fates {
    seed: u64,
    online_share: f64,
    receive: LogNormal<f64>,
    open_share: f64,
    open: LogNormal<f64>,
    give_up_after: Duration,
}

fn log_normal(delay: DelayDistribution) -> Result<LogNormal<f64>> {
    LogNormal::new(delay.median.as_secs_f64().ln(), delay.spread).context("a log-normal delay")
}

impl Fates {
    pub fn new(config: &ReceiptsConfig) -> Result<Self> {
        Ok(Self {
            seed: config.seed,
            online_share: config.online_share,
            receive: log_normal(config.receive_delay)?,
            open_share: config.open_share,
            open: log_normal(config.open_delay)?,
            give_up_after: config.give_up_after,
        })
    }

    /// The fate of the phone with `token` for the push of `notification_id`.
    pub fn of(&self, notification_id: Uuid, token: &str) -> Fate {
        let mut hasher = Xxh3::with_seed(self.seed);
        hasher.update(notification_id.as_bytes());
        hasher.update(token.as_bytes());
        let mut rng = StdRng::seed_from_u64(hasher.digest());
        // Every draw is made whatever the earlier ones gave, so changing
        // one share does not reshuffle the other draws.
        let online = rng.random_bool(self.online_share);
        let received_after = self.draw(&self.receive, &mut rng);
        let opens = rng.random_bool(self.open_share);
        let opened_after = self.draw(&self.open, &mut rng);
        match (online, received_after) {
            (true, Some(received_after)) => Fate::Reports {
                received_after,
                opened_after: opened_after.filter(|_| opens),
            },
            _ => Fate::Silent,
        }
    }

    /// A delay, or `None` past the cut-off.
    fn draw(&self, delay: &LogNormal<f64>, rng: &mut StdRng) -> Option<Duration> {
        let seconds = delay.sample(rng);
        (seconds <= self.give_up_after.as_secs_f64()).then(|| Duration::from_secs_f64(seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fates(edit: impl FnOnce(&mut ReceiptsConfig)) -> Fates {
        let mut config = ReceiptsConfig::new("http://127.0.0.1:1/", "k");
        edit(&mut config);
        Fates::new(&config).unwrap()
    }

    fn tokens(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{i:064x}")).collect()
    }

    #[test]
    fn the_same_seed_gives_every_phone_the_same_fate() {
        let id = Uuid::from_u128(42);
        let (a, b, other) = (fates(|_| {}), fates(|_| {}), fates(|c| c.seed = 7));
        let tokens = tokens(200);
        let drawn: Vec<Fate> = tokens.iter().map(|t| a.of(id, t)).collect();
        assert_eq!(drawn, tokens.iter().map(|t| b.of(id, t)).collect::<Vec<_>>());
        assert_ne!(drawn, tokens.iter().map(|t| other.of(id, t)).collect::<Vec<_>>());
        assert_ne!(a.of(id, &tokens[0]), a.of(Uuid::from_u128(43), &tokens[0]));
    }

    #[test]
    fn the_default_audience_reports_within_seconds_with_a_tail_and_some_never() {
        let fates = fates(|_| {});
        let id = Uuid::from_u128(1);
        let drawn: Vec<Fate> = tokens(10_000).iter().map(|t| fates.of(id, t)).collect();
        let mut received: Vec<Duration> = drawn
            .iter()
            .filter_map(|fate| match fate {
                Fate::Reports { received_after, .. } => Some(*received_after),
                Fate::Silent => None,
            })
            .collect();
        received.sort();
        let share = received.len() as f64 / drawn.len() as f64;
        assert!((0.93..0.97).contains(&share), "online {share}");
        let median = received[received.len() / 2].as_secs_f64();
        assert!((1.7..2.3).contains(&median), "median {median}");
        let p99 = received[received.len() * 99 / 100].as_secs_f64();
        assert!((20.0..50.0).contains(&p99), "p99 {p99}");
        assert!(received.iter().all(|d| *d <= Duration::from_secs(600)));
        let opens = drawn
            .iter()
            .filter(|fate| {
                matches!(
                    fate,
                    Fate::Reports {
                        opened_after: Some(_),
                        ..
                    }
                )
            })
            .count() as f64
            / received.len() as f64;
        assert!((0.08..0.12).contains(&opens), "opens {opens}");
    }

    #[test]
    fn everyone_online_and_opening_means_every_phone_reports_both() {
        let fates = fates(|c| {
            c.online_share = 1.0;
            c.open_share = 1.0;
            c.receive_delay.spread = 0.0;
        });
        for token in tokens(100) {
            match fates.of(Uuid::nil(), &token) {
                Fate::Reports {
                    received_after,
                    opened_after: Some(_),
                } => {
                    // Spread 0: every phone takes the median.
                    let off = received_after.as_secs_f64() - 2.0;
                    assert!(off.abs() < 1e-6, "{received_after:?}");
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
