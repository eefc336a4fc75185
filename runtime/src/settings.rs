//! Settings every service shares, as `clap` argument groups: each has a
//! `--flag`, a `CLARION_*` environment variable and a default that works on
//! a developer machine. `--help` lists them all.

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
        default_value_t = 16,
        value_parser = clap::value_parser!(u32).range(1..=1000)
    )]
    pub pool_size: u32,

    /// Seconds a caller waits for a free pooled connection before failing.
    #[arg(
        long = "database-connect-timeout-secs",
        env = "CLARION_DATABASE_CONNECT_TIMEOUT_SECS",
        default_value_t = 5,
        value_parser = clap::value_parser!(u64).range(1..=600)
    )]
    pub connect_timeout_secs: u64,
}

impl DatabaseSettings {
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(self.connect_timeout_secs)
    }
}

/// Where RabbitMQ is and which names this installation uses on it.
#[derive(Debug, Clone, Args)]
pub struct BrokerSettings {
    /// RabbitMQ URL.
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
