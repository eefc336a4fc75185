//! The dispatcher's settings (`clarion-dispatcher --help` lists them).

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Parser};
use clarion_proto::Platform;
use clarion_runtime::telemetry::OtlpSettings;
use clarion_runtime::{BrokerSettings, LogSettings, ShutdownSettings, TlsSettings};

use crate::channels::ChannelSettings;
use crate::http2::Liveness;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "clarion-dispatcher",
    version,
    args_override_self = true,
    about = "Clarion dispatcher: consumes one platform's token batches and pushes them to \
             APNs or FCM over persistent HTTP/2 connections"
)]
pub struct Settings {
    /// Which platform this process delivers to: `ios` (APNs) or `android` (FCM).
    #[arg(long, env = "CLARION_PLATFORM")]
    pub platform: Platform,

    /// Address of the health endpoints (/healthz, /readyz).
    #[arg(
        long = "http-addr",
        env = "CLARION_HTTP_ADDR",
        default_value = "127.0.0.1:8082"
    )]
    pub http_addr: SocketAddr,

    /// Apps beside (or instead of) `default`, which the APNs / FCM settings
    /// here define when given: a TOML file with one `[apps.<id>]` table
    /// each, its credentials in a table per channel (`[apps.<id>.apns]`,
    /// `[apps.<id>.fcm]`), re-read when it changes (see the book's
    /// docs/src/operate/apps.md). The dispatcher serves every app with its
    /// platform's credentials, and does not start without one.
    #[arg(long = "apps-file", env = "CLARION_APPS_FILE")]
    pub apps_file: Option<std::path::PathBuf>,

    /// Every channel's settings (the one `--platform` picks is used).
    #[command(flatten)]
    pub channels: ChannelSettings,

    #[command(flatten)]
    pub delivery: DeliverySettings,

    #[command(flatten)]
    pub broker: BrokerSettings,

    #[command(flatten)]
    pub tls: TlsSettings,

    #[command(flatten)]
    pub log: LogSettings,

    #[command(flatten)]
    pub otlp: OtlpSettings,

    #[command(flatten)]
    pub shutdown: ShutdownSettings,
}

/// How batches are delivered.
#[derive(Debug, Clone, Args)]
pub struct DeliverySettings {
    /// Persistent HTTP/2 connections per provider endpoint.
    #[arg(
        long = "dispatch-connections",
        env = "CLARION_DISPATCH_CONNECTIONS",
        default_value_t = 2,
        value_parser = clap::value_parser!(u16).range(1..=64)
    )]
    pub connections: u16,

    /// Concurrent HTTP/2 streams per connection, at most (the server's own
    /// limit, ~1000 at Apple, applies too).
    #[arg(
        long = "dispatch-streams-per-connection",
        env = "CLARION_DISPATCH_STREAMS_PER_CONNECTION",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u32).range(1..=100_000)
    )]
    pub streams_per_connection: u32,

    /// Pushes of one batch in flight at once (HTTP/2 streams also wait for
    /// the server's per-connection limit, ~1000 at Apple).
    #[arg(
        long = "dispatch-streams-per-batch",
        env = "CLARION_DISPATCH_STREAMS_PER_BATCH",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u32).range(1..=10_000)
    )]
    pub streams_per_batch: u32,

    /// Batches this process delivers at once (one consumer each). Workers
    /// × prefetch × the harvester's batch size is what a dispatcher holds
    /// unacknowledged, and sends again after a crash: 2 × 1 × 2,000 by
    /// default.
    #[arg(
        long = "dispatch-batch-workers",
        env = "CLARION_DISPATCH_BATCH_WORKERS",
        default_value_t = 2,
        value_parser = clap::value_parser!(u16).range(1..=256)
    )]
    pub batch_workers: u16,

    /// Live Activity channel commands (create a channel, broadcast, delete
    /// a channel) an iOS dispatcher carries out at once: one consumer each
    /// of the channel-command queue, one command in hand each.
    #[arg(
        long = "dispatch-channel-workers",
        env = "CLARION_DISPATCH_CHANNEL_WORKERS",
        default_value_t = 2,
        value_parser = clap::value_parser!(u16).range(1..=64)
    )]
    pub channel_workers: u16,

    /// Batches each worker takes from the broker ahead of time.
    #[arg(
        long = "dispatch-prefetch",
        env = "CLARION_DISPATCH_PREFETCH",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..=100)
    )]
    pub prefetch: u16,

    /// Threads sending pushes. One thread drives ~60k pushes/s; more only
    /// pay off with cores to spare (measured on 2 cores: 1 beats 2).
    #[arg(
        long = "dispatch-threads",
        env = "CLARION_DISPATCH_THREADS",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..=256)
    )]
    pub threads: u16,

    /// Attempts per push before it may count as failed (429, 5xx,
    /// connection errors): a push keeps being retried until it has had
    /// this many attempts and its retry window is over.
    #[arg(
        long = "dispatch-max-attempts",
        env = "CLARION_DISPATCH_MAX_ATTEMPTS",
        default_value_t = 5,
        value_parser = clap::value_parser!(u32).range(1..=50)
    )]
    pub max_attempts: u32,

    /// Seconds a push answered 429 / 5xx / with a connection error keeps
    /// being retried (with backoff) after its first attempt, however many
    /// attempts that takes: a provider outage of a few seconds must not
    /// lose devices. 0 = only the attempts count.
    #[arg(
        long = "dispatch-retry-window-secs",
        env = "CLARION_DISPATCH_RETRY_WINDOW_SECS",
        default_value_t = 120,
        value_parser = clap::value_parser!(u64).range(0..=3600)
    )]
    pub retry_window_secs: u64,

    /// First retry delay in milliseconds; doubled per attempt, with jitter.
    #[arg(
        long = "dispatch-retry-base-ms",
        env = "CLARION_DISPATCH_RETRY_BASE_MS",
        default_value_t = 200
    )]
    pub retry_base_ms: u64,

    /// Longest retry delay in milliseconds (a longer `Retry-After` still
    /// wins, up to --dispatch-retry-after-max-secs).
    #[arg(
        long = "dispatch-retry-max-ms",
        env = "CLARION_DISPATCH_RETRY_MAX_MS",
        default_value_t = 10_000
    )]
    pub retry_max_ms: u64,

    /// Longest `Retry-After` honoured, in seconds: a provider asking for
    /// longer (an hour, or a nonsense value) is retried after this instead,
    /// so one answer cannot stall the dispatcher.
    #[arg(
        long = "dispatch-retry-after-max-secs",
        env = "CLARION_DISPATCH_RETRY_AFTER_MAX_SECS",
        default_value_t = 60,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub retry_after_max_secs: u64,

    /// Pushes of a notification's segment (iOS production, iOS sandbox,
    /// Android) this process watches before judging it: when all of its
    /// first this many are answered gone, invalid or in a way that points
    /// at the configuration (a wrong endpoint, key or topic), the rest of
    /// the segment is held back, not pushed; 0 turns the breaker off.
    #[arg(
        long = "dispatch-breaker-pushes",
        env = "CLARION_DISPATCH_BREAKER_PUSHES",
        default_value_t = 200,
        value_parser = clap::value_parser!(u32).range(0..=1_000_000)
    )]
    pub breaker_pushes: u32,

    /// Seconds a push may take before it is abandoned and retried, waiting
    /// for a connection (TCP, TLS and HTTP/2 handshakes) included.
    #[arg(
        long = "dispatch-request-timeout-secs",
        env = "CLARION_DISPATCH_REQUEST_TIMEOUT_SECS",
        default_value_t = 10
    )]
    pub request_timeout_secs: u64,

    /// Seconds between HTTP/2 PINGs on each provider connection: a
    /// connection whose route died without a word (no FIN, no RST) is found
    /// out by a PING, not by the pushes that would wait on it.
    #[arg(
        long = "dispatch-ping-interval-secs",
        env = "CLARION_DISPATCH_PING_INTERVAL_SECS",
        default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub ping_interval_secs: u64,

    /// Seconds a PING may go unanswered before its connection is closed
    /// and replaced.
    #[arg(
        long = "dispatch-ping-timeout-secs",
        env = "CLARION_DISPATCH_PING_TIMEOUT_SECS",
        default_value_t = 10,
        value_parser = clap::value_parser!(u64).range(1..=600)
    )]
    pub ping_timeout_secs: u64,

    /// Pushes sent on one connection that time out in a row (no answer in
    /// between) before the connection is closed and replaced.
    #[arg(
        long = "dispatch-timeouts-before-reconnect",
        env = "CLARION_DISPATCH_TIMEOUTS_BEFORE_RECONNECT",
        default_value_t = 3,
        value_parser = clap::value_parser!(u32).range(1..=1000)
    )]
    pub timeouts_before_reconnect: u32,

    /// Seconds pushes may keep failing (connection errors, timeouts, 429,
    /// 5xx), none succeeding, before /readyz answers 503; it is ready
    /// again at the next push that succeeds.
    #[arg(
        long = "dispatch-not-ready-after-secs",
        env = "CLARION_DISPATCH_NOT_READY_AFTER_SECS",
        default_value_t = 60,
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    pub not_ready_after_secs: u64,

    /// Most pushes per second from this process; 0 = no cap. (FCM's
    /// per-project quota is shared out by --fcm-quota-per-minute.)
    #[arg(
        long = "dispatch-rate-limit",
        env = "CLARION_DISPATCH_RATE_LIMIT",
        default_value_t = 0
    )]
    pub rate_limit: u32,
}

impl DeliverySettings {
    pub fn retry_base(&self) -> Duration {
        Duration::from_millis(self.retry_base_ms)
    }

    pub fn retry_max(&self) -> Duration {
        Duration::from_millis(self.retry_max_ms.max(self.retry_base_ms))
    }

    pub fn retry_window(&self) -> Duration {
        Duration::from_secs(self.retry_window_secs)
    }

    pub fn retry_after_max(&self) -> Duration {
        Duration::from_secs(self.retry_after_max_secs)
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs.max(1))
    }

    pub fn liveness(&self) -> Liveness {
        Liveness {
            ping_interval: Duration::from_secs(self.ping_interval_secs),
            ping_timeout: Duration::from_secs(self.ping_timeout_secs),
            timeouts_in_a_row: self.timeouts_before_reconnect,
        }
    }

    pub fn not_ready_after(&self) -> Duration {
        Duration::from_secs(self.not_ready_after_secs)
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
