//! The coordinator's settings: flags, `CLARION_*` environment variables and
//! developer-machine defaults (`clarion-coordinator --help` lists them).

use std::net::SocketAddr;
use std::time::Duration;

use crate::actors::job_relay::Scheduling;
use crate::progress::completion::Valve;
use crate::scheduling::Budget;
use clap::Parser;
use clarion_runtime::telemetry::OtlpSettings;
use clarion_runtime::{BrokerSettings, DatabaseSettings, LogSettings, ShutdownSettings};

use crate::auth::ApiKeys;

/// Key used when `CLARION_API_KEYS` is not set: fine on a laptop, never in
/// production (the coordinator warns at start whenever it is accepted).
pub const DEV_API_KEY: &str = "dev-admin-key";
const DEV_API_KEYS: &str = "dev-admin-key=admin";

#[derive(Debug, Clone, Parser)]
#[command(
    name = "clarion-coordinator",
    version,
    args_override_self = true,
    about = "Clarion coordinator: the HTTP API for registrations and notifications, \
             shard planning, live progress and token cleanup"
)]
pub struct Settings {
    /// Address the HTTP API (and /healthz, /readyz) listens on.
    #[arg(
        long = "http-addr",
        env = "CLARION_HTTP_ADDR",
        default_value = "127.0.0.1:8080"
    )]
    pub http_addr: SocketAddr,

    /// HTTP worker threads (default: one per CPU core).
    #[arg(long = "http-workers", env = "CLARION_HTTP_WORKERS")]
    pub http_workers: Option<usize>,

    /// API keys and their scopes, `key=scope+scope,...`; scopes are
    /// `register`, `send` and `admin` (admin implies every scope).
    #[arg(
        long = "api-keys",
        env = "CLARION_API_KEYS",
        default_value = DEV_API_KEYS,
        hide_env_values = true,
        value_parser = ApiKeys::parse
    )]
    pub api_keys: ApiKeys,

    /// Most topics one device may follow.
    #[arg(
        long = "max-topics-per-device",
        env = "CLARION_MAX_TOPICS_PER_DEVICE",
        default_value_t = 100,
        value_parser = clap::value_parser!(u32).range(1..=10_000)
    )]
    pub max_topics_per_device: u32,

    /// Oldest per-topic subscriber count the topics API may answer with, in seconds.
    #[arg(
        long = "topic-count-max-age-secs",
        env = "CLARION_TOPIC_COUNT_MAX_AGE_SECS",
        default_value_t = 10
    )]
    pub topic_count_max_age_secs: u64,

    /// Tokens one shard job should cover: a notification's audience is cut
    /// into about audience / this many jobs (at most 1024).
    #[arg(
        long = "tokens-per-job",
        env = "CLARION_TOKENS_PER_JOB",
        default_value_t = 10_000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub tokens_per_job: u64,

    /// Milliseconds of delivery the job relay keeps released ahead of the
    /// dispatchers, at the delivery rate it measures: the queues after the
    /// relay hold about this much work, so a newly sent alert reaches its
    /// first devices after about this long however big the sends before it.
    /// Smaller overtakes sooner; too small lets the dispatchers run dry
    /// between releases.
    #[arg(
        long = "schedule-ahead-ms",
        env = "CLARION_SCHEDULE_AHEAD_MS",
        default_value_t = 1500,
        value_parser = clap::value_parser!(u64).range(100..=600_000)
    )]
    pub schedule_ahead_ms: u64,

    /// Tokens per platform the job relay may keep released ahead of the
    /// dispatchers whatever the measured rate (an idle cluster has none
    /// yet): the first jobs of a send go out at once up to this much.
    #[arg(
        long = "schedule-min-tokens",
        env = "CLARION_SCHEDULE_MIN_TOKENS",
        default_value_t = 50_000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub schedule_min_tokens: u64,

    /// Seconds a notification in flight may go without progress (no job or
    /// delivery report counted) before the watchdog fails it with a reason
    /// saying what never reported.
    #[arg(
        long = "stall-secs",
        env = "CLARION_STALL_SECS",
        default_value_t = 600,
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    pub stall_secs: u64,

    /// Report messages the coordinator takes from the broker ahead of processing.
    #[arg(
        long = "reports-prefetch",
        env = "CLARION_REPORTS_PREFETCH",
        default_value_t = 64,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub reports_prefetch: u16,

    /// Largest share of a segment's pushes (iOS production, iOS sandbox,
    /// Android) refused as invalid whose registrations are still deleted.
    /// Above it Clarion suspects its own configuration (bundle id, Firebase
    /// project, APNs environment), deletes none of that segment's tokens
    /// and says so loudly.
    #[arg(
        long = "invalid-token-threshold",
        env = "CLARION_INVALID_TOKEN_THRESHOLD",
        default_value_t = 0.05,
        value_parser = parse_share
    )]
    pub invalid_token_threshold: f64,

    /// Largest share of a segment's pushes answered "gone" (uninstalled)
    /// whose registrations are still deleted. Above it the provider, or the
    /// endpoint Clarion talks to, is suspected instead of the devices.
    #[arg(
        long = "gone-token-threshold",
        env = "CLARION_GONE_TOKEN_THRESHOLD",
        default_value_t = 0.2,
        value_parser = parse_share
    )]
    pub gone_token_threshold: f64,

    #[command(flatten)]
    pub database: DatabaseSettings,

    #[command(flatten)]
    pub broker: BrokerSettings,

    #[command(flatten)]
    pub log: LogSettings,

    #[command(flatten)]
    pub otlp: OtlpSettings,

    #[command(flatten)]
    pub shutdown: ShutdownSettings,
}

impl Settings {
    pub fn topic_count_max_age(&self) -> Duration {
        Duration::from_secs(self.topic_count_max_age_secs)
    }

    /// How the job relay decides what to release.
    pub fn scheduling(&self) -> Scheduling {
        Scheduling {
            budget: Budget {
                ahead: Duration::from_millis(self.schedule_ahead_ms),
                min_tokens: self.schedule_min_tokens,
            },
            tokens_per_job: self.tokens_per_job,
        }
    }

    /// The safety valve's thresholds.
    pub fn valve(&self) -> Valve {
        Valve {
            gone: self.gone_token_threshold,
            invalid: self.invalid_token_threshold,
        }
    }

    pub fn stall(&self) -> Duration {
        Duration::from_secs(self.stall_secs)
    }

    /// True when the well-known development key is accepted.
    pub fn accepts_dev_key(&self) -> bool {
        self.api_keys.identify(DEV_API_KEY).is_some()
    }
}

fn parse_share(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("{value:?} is not a share between 0 and 1")),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Settings::command().debug_assert();
    }
}
