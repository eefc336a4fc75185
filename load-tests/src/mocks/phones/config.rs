//! How the phones behind a mock behave and where they report: the share
//! online, the delay before a receipt and before an open (log-normal, by
//! median and spread), the seed, and the bounds of the reporting pipeline —
//! in-process ([`ReceiptsConfig`]) and on the mock binaries' command line
//! ([`ReceiptsArgs`]).

use std::time::Duration;

use anyhow::{Result, bail};

/// The most receipts one `POST /api/v1/receipts` carries (the API's limit).
pub const MAX_BATCH: usize = 500;

/// A log-normal delay: half of the phones take less than `median`; the
/// spread is the standard deviation of the delay's natural logarithm
/// (0 makes every phone take the median; 1 puts the 90th percentile at
/// 3.6 × the median and the 99th at 10 ×).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DelayDistribution {
    pub median: Duration,
    pub spread: f64,
}

/// The phones behind one mock, and where they report.
#[derive(Debug, Clone)]
pub struct ReceiptsConfig {
    /// Where receipts go: the coordinator's `…/api/v1/receipts`.
    pub url: String,
    /// An API key of scope `register`, sent as `Authorization: Bearer`.
    pub key: String,
    /// Seeds each phone's draws (with its notification id and token), so
    /// a run is repeatable whatever order the pushes arrive in.
    pub seed: u64,
    /// Only the phones whose token ends with this report, when set: a panel
    /// of the audience whose registrations say `receipts: true` (the 90in2
    /// benchmark's panel is the tokens ending in `00`, one in 256). The
    /// other phones are outside the reporting audience and stay silent.
    pub panel_suffix: Option<String>,
    /// Share of phones that are online and report (0–1); the others never do.
    pub online_share: f64,
    /// From the push's acceptance to the phone's `received`.
    pub receive_delay: DelayDistribution,
    /// Share of reporting phones whose reader opens the alert (0–1).
    pub open_share: f64,
    /// From `received` to `opened`.
    pub open_delay: DelayDistribution,
    /// A phone whose draw is later than this never reports (the draw's
    /// tail is unbounded; a receipt hours late is as good as none here).
    pub give_up_after: Duration,
    /// Receipts waiting for their time, at most; further ones are counted
    /// as dropped. The bound holds the mock's memory (about 250 bytes a
    /// receipt with an FCM token): the default, 200,000, is 50 MB at most.
    /// With the default delays a receipt waits ~7 s on average (opens
    /// included), so it holds a steady ~28k accepted pushes/s; a faster
    /// burst drops receipts — a phone that never reports is realistic, and
    /// the count says how many.
    pub max_pending: usize,
    /// Receipts per request, at most [`MAX_BATCH`].
    pub batch_size: usize,
    /// How often due receipts are sent (a full batch goes at once).
    pub flush_every: Duration,
    /// Deadline of one HTTP request, connection included.
    pub request_timeout: Duration,
    /// Tries of one batch before its receipts count as failed.
    pub max_attempts: u32,
    /// Longest wait between two tries (`Retry-After` included).
    pub max_retry_wait: Duration,
    /// Requests in flight at once, at most (each holds one batch).
    pub max_in_flight: usize,
}

impl ReceiptsConfig {
    /// Phones modelled on a real audience: 95% online, most receipts within
    /// seconds (median 2 s, spread 1.2: 90% within 9.3 s, 99% within 33 s,
    /// a tail to the 10-minute cut-off), one reader in ten opening the
    /// alert about 20 s after it arrived.
    pub fn new(url: impl Into<String>, key: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            key: key.into(),
            seed: 0x90_12,
            panel_suffix: None,
            online_share: 0.95,
            receive_delay: DelayDistribution {
                median: Duration::from_secs(2),
                spread: 1.2,
            },
            open_share: 0.1,
            open_delay: DelayDistribution {
                median: Duration::from_secs(20),
                spread: 1.0,
            },
            give_up_after: Duration::from_secs(600),
            max_pending: 200_000,
            batch_size: MAX_BATCH,
            flush_every: Duration::from_millis(200),
            request_timeout: Duration::from_secs(10),
            max_attempts: 8,
            max_retry_wait: Duration::from_secs(30),
            max_in_flight: 4,
        }
    }

    /// Refuses settings the phones cannot follow.
    pub fn check(&self) -> Result<()> {
        for (name, share) in [
            ("online share", self.online_share),
            ("open share", self.open_share),
        ] {
            if !(0.0..=1.0).contains(&share) {
                bail!("the {name} is {share}; it must be from 0 to 1");
            }
        }
        for (name, delay) in [
            ("receipt delay", self.receive_delay),
            ("open delay", self.open_delay),
        ] {
            if delay.median.is_zero() || !delay.spread.is_finite() || delay.spread < 0.0 {
                bail!("the {name} needs a median above 0 and a finite spread of 0 or more");
            }
        }
        if !(1..=MAX_BATCH).contains(&self.batch_size) {
            bail!("a batch holds 1 to {MAX_BATCH} receipts, not {}", self.batch_size);
        }
        if self.max_pending == 0 || self.max_in_flight == 0 || self.max_attempts == 0 {
            bail!("max_pending, max_in_flight and max_attempts must be at least 1");
        }
        if self.flush_every.is_zero() || self.request_timeout.is_zero() {
            bail!("flush_every and request_timeout must be above 0");
        }
        Ok(())
    }
}

/// The receipts options of `clarion-mock-apns` and `clarion-mock-fcm`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReceiptsArgs {
    /// Post receipts for the accepted pushes to this URL (the coordinator's
    /// `http://…/api/v1/receipts`); off when unset.
    #[arg(long, requires = "receipts_key")]
    pub receipts_url: Option<String>,
    /// API key (scope `register`) the receipts are posted with.
    #[arg(long)]
    pub receipts_key: Option<String>,
    /// Seed of the phones' draws.
    #[arg(long, default_value_t = 0x90_12)]
    pub receipts_seed: u64,
    /// Share of phones online (they report; the others never do).
    #[arg(long, default_value_t = 0.95)]
    pub receipts_online_share: f64,
    /// Median delay from acceptance to `received`, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub receipts_median_ms: u64,
    /// Spread of that delay (standard deviation of its logarithm).
    #[arg(long, default_value_t = 1.2)]
    pub receipts_spread: f64,
    /// Share of reporting phones whose reader opens the alert.
    #[arg(long, default_value_t = 0.1)]
    pub receipts_open_share: f64,
    /// Median delay from `received` to `opened`, in milliseconds.
    #[arg(long, default_value_t = 20_000)]
    pub receipts_open_median_ms: u64,
    /// Spread of the open delay.
    #[arg(long, default_value_t = 1.0)]
    pub receipts_open_spread: f64,
    /// Receipts waiting for their time, at most (further ones are dropped
    /// and counted).
    #[arg(long, default_value_t = 200_000)]
    pub receipts_max_pending: usize,
}

impl ReceiptsArgs {
    /// The phones' settings, or `None` when receipts are off.
    pub fn config(&self) -> Result<Option<ReceiptsConfig>> {
        let (Some(url), Some(key)) = (&self.receipts_url, &self.receipts_key) else {
            return Ok(None);
        };
        let config = ReceiptsConfig {
            seed: self.receipts_seed,
            online_share: self.receipts_online_share,
            receive_delay: DelayDistribution {
                median: Duration::from_millis(self.receipts_median_ms),
                spread: self.receipts_spread,
            },
            open_share: self.receipts_open_share,
            open_delay: DelayDistribution {
                median: Duration::from_millis(self.receipts_open_median_ms),
                spread: self.receipts_open_spread,
            },
            max_pending: self.receipts_max_pending,
            ..ReceiptsConfig::new(url.clone(), key.clone())
        };
        config.check()?;
        Ok(Some(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        receipts: ReceiptsArgs,
    }

    #[test]
    fn receipts_are_off_without_a_url_and_checked_with_one() {
        let off = Cli::parse_from(["mock"]);
        assert!(off.receipts.config().unwrap().is_none());
        let on = Cli::parse_from([
            "mock",
            "--receipts-url",
            "http://127.0.0.1:8080/api/v1/receipts",
            "--receipts-key",
            "app-k3y",
            "--receipts-online-share",
            "0.5",
        ]);
        let config = on.receipts.config().unwrap().unwrap();
        assert_eq!(config.key, "app-k3y");
        assert_eq!(config.online_share, 0.5);
        assert_eq!(config.receive_delay.median, Duration::from_secs(2));
        assert!(Cli::try_parse_from(["mock", "--receipts-url", "http://x/"]).is_err());
        let wrong = Cli::parse_from([
            "mock",
            "--receipts-url",
            "http://x/",
            "--receipts-key",
            "k",
            "--receipts-open-share",
            "1.5",
        ]);
        assert!(wrong.receipts.config().is_err());
        let mut config = ReceiptsConfig::new("http://x/", "k");
        config.batch_size = MAX_BATCH + 1;
        assert!(config.check().is_err());
    }
}
