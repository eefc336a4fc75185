//! Settings every service shares, as `clap` argument groups: each has a
//! `--flag`, a `CLARION_*` environment variable and a default that works on
//! a developer machine. `--help` lists them all.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

/// Where PostgreSQL is and how many connections this process may hold.
#[derive(Debug, Clone, Args)]
pub struct DatabaseSettings {
    /// PostgreSQL URL.
    #[arg(
        id = "database_url",
        value_name = "URL",
        long = "database-url",
        env = "CLARION_DATABASE_URL",
        default_value = "postgres://clarion:clarion@127.0.0.1:5432/clarion",
        hide_env_values = true
    )]
    pub url: String,

    /// Most connections this process opens to PostgreSQL (the pool is bounded).
    #[arg(
        long = "database-pool-size",
        env = "CLARION_DATABASE_POOL_SIZE",
        default_value_t = DatabaseSettings::POOL_SIZE,
        value_parser = clap::value_parser!(u32).range(1..=1000)
    )]
    pub pool_size: u32,

    /// Seconds to open a connection (TCP, start-up and authentication
    /// together), and the longest a caller waits for a pooled connection.
    #[arg(
        long = "database-connect-timeout-secs",
        env = "CLARION_DATABASE_CONNECT_TIMEOUT_SECS",
        default_value_t = DatabaseSettings::CONNECT_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(1..=600)
    )]
    pub connect_timeout_secs: u64,

    /// Seconds a connection may be silent before TCP keepalive probes start;
    /// with the interval and the probe count below, a dead server (or a
    /// dropped route) is noticed after idle + interval × probes seconds,
    /// instead of the system default of over two hours.
    #[arg(
        long = "database-keepalive-idle-secs",
        env = "CLARION_DATABASE_KEEPALIVE_IDLE_SECS",
        default_value_t = DatabaseSettings::KEEPALIVE_IDLE_SECS,
        value_parser = clap::value_parser!(u64).range(1..=7200)
    )]
    pub keepalive_idle_secs: u64,

    /// Seconds between TCP keepalive probes.
    #[arg(
        long = "database-keepalive-interval-secs",
        env = "CLARION_DATABASE_KEEPALIVE_INTERVAL_SECS",
        default_value_t = DatabaseSettings::KEEPALIVE_INTERVAL_SECS,
        value_parser = clap::value_parser!(u64).range(1..=600)
    )]
    pub keepalive_interval_secs: u64,

    /// Unanswered TCP keepalive probes before the connection is dropped.
    #[arg(
        long = "database-keepalive-probes",
        env = "CLARION_DATABASE_KEEPALIVE_PROBES",
        default_value_t = DatabaseSettings::KEEPALIVE_PROBES,
        value_parser = clap::value_parser!(u32).range(1..=100)
    )]
    pub keepalive_probes: u32,

    /// Seconds one statement may run before PostgreSQL cancels it
    /// (`statement_timeout`); 0 = no limit. Generous on purpose: the
    /// harvester streams a whole shard job in one statement while it
    /// publishes the job's batches, so that statement lasts as long as the
    /// broker takes to confirm them; everything else Clarion runs takes
    /// milliseconds.
    #[arg(
        long = "database-statement-timeout-secs",
        env = "CLARION_DATABASE_STATEMENT_TIMEOUT_SECS",
        default_value_t = DatabaseSettings::STATEMENT_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(0..=86_400)
    )]
    pub statement_timeout_secs: u64,

    /// Seconds a session may sit idle inside an open transaction, holding
    /// its locks, before PostgreSQL ends it
    /// (`idle_in_transaction_session_timeout`); 0 = no limit. The longest
    /// wait inside a transaction is the coordinator's job relay's, while the
    /// jobs it claimed are published and confirmed (10 s per notification).
    #[arg(
        long = "database-idle-in-transaction-timeout-secs",
        env = "CLARION_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECS",
        default_value_t = DatabaseSettings::IDLE_IN_TRANSACTION_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(0..=86_400)
    )]
    pub idle_in_transaction_timeout_secs: u64,
}

impl DatabaseSettings {
    pub const POOL_SIZE: u32 = 16;
    pub const CONNECT_TIMEOUT_SECS: u64 = 5;
    pub const KEEPALIVE_IDLE_SECS: u64 = 30;
    pub const KEEPALIVE_INTERVAL_SECS: u64 = 10;
    pub const KEEPALIVE_PROBES: u32 = 3;
    pub const STATEMENT_TIMEOUT_SECS: u64 = 300;
    pub const IDLE_IN_TRANSACTION_TIMEOUT_SECS: u64 = 120;

    /// Settings for `url` with every other value at its default.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            pool_size: Self::POOL_SIZE,
            connect_timeout_secs: Self::CONNECT_TIMEOUT_SECS,
            keepalive_idle_secs: Self::KEEPALIVE_IDLE_SECS,
            keepalive_interval_secs: Self::KEEPALIVE_INTERVAL_SECS,
            keepalive_probes: Self::KEEPALIVE_PROBES,
            statement_timeout_secs: Self::STATEMENT_TIMEOUT_SECS,
            idle_in_transaction_timeout_secs: Self::IDLE_IN_TRANSACTION_TIMEOUT_SECS,
        }
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(self.connect_timeout_secs)
    }

    /// How long a silent connection is kept: keepalive idle time plus every
    /// probe. Also the longest data sent may stay unacknowledged
    /// (`TCP_USER_TIMEOUT`), so a server that vanished mid-query is noticed
    /// as soon as an idle one.
    pub fn dead_peer_timeout(&self) -> Duration {
        Duration::from_secs(
            self.keepalive_idle_secs.saturating_add(
                self.keepalive_interval_secs
                    .saturating_mul(u64::from(self.keepalive_probes)),
            ),
        )
    }

    /// The per-session settings sent at start-up (`options`).
    pub fn session_options(&self) -> String {
        format!(
            "-c statement_timeout={}s -c idle_in_transaction_session_timeout={}s",
            self.statement_timeout_secs, self.idle_in_transaction_timeout_secs
        )
    }
}

/// Where RabbitMQ is and which names this installation uses on it.
#[derive(Debug, Clone, Args)]
pub struct BrokerSettings {
    /// RabbitMQ URL, or the URLs of a cluster's nodes comma-separated: a
    /// connection goes to the first node that answers and, when it drops,
    /// to the next one.
    #[arg(
        id = "amqp_url",
        value_name = "URL",
        long = "amqp-url",
        env = "CLARION_AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f",
        hide_env_values = true
    )]
    pub url: String,

    /// Prefix of every exchange and queue name, so several installations can
    /// share one broker.
    #[arg(
        id = "amqp_namespace",
        value_name = "NAME",
        long = "amqp-namespace",
        env = "CLARION_AMQP_NAMESPACE",
        default_value = "clarion"
    )]
    pub namespace: String,
}

/// Which certificates the process trusts besides the system's store.
#[derive(Debug, Clone, Default, Args)]
pub struct TlsSettings {
    /// PEM certificates trusted in addition to the system roots by every TLS
    /// client of this process: PostgreSQL (`sslmode=verify-ca` /
    /// `verify-full`), RabbitMQ (`amqps://`), and the dispatcher's APNs,
    /// FCM and OAuth2 clients.
    #[arg(
        id = "extra_ca_file",
        value_name = "FILE",
        long = "extra-ca-file",
        env = "CLARION_EXTRA_CA_FILE"
    )]
    pub extra_ca_file: Option<PathBuf>,
}

/// How the process logs.
#[derive(Debug, Clone, Args)]
pub struct LogSettings {
    /// Log line format.
    #[arg(id = "log_format", value_name = "FORMAT", long = "log-format", env = "CLARION_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub format: LogFormat,

    /// Log filter in `tracing` syntax, e.g. `info` or `info,clarion_coordinator=debug`.
    #[arg(
        id = "log_filter",
        value_name = "FILTER",
        long = "log",
        env = "CLARION_LOG",
        default_value = "info"
    )]
    pub filter: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// How long a stopping service may take to finish its work in flight.
#[derive(Debug, Clone, Args)]
pub struct ShutdownSettings {
    /// Seconds, after SIGTERM, to finish and ack the jobs or batches in
    /// flight; what is still unfinished then goes back to its queue.
    /// Kubernetes' terminationGracePeriodSeconds should be a little longer.
    #[arg(
        id = "shutdown_grace_secs",
        value_name = "SECONDS",
        long = "shutdown-grace-secs",
        env = "CLARION_SHUTDOWN_GRACE_SECS",
        default_value_t = 30
    )]
    pub grace_secs: u64,
}

impl ShutdownSettings {
    pub fn grace(&self) -> Duration {
        Duration::from_secs(self.grace_secs)
    }
}
