//! The harvester's settings (`clarion-harvester --help` lists them).

use std::net::SocketAddr;

use clap::Parser;
use clarion_runtime::telemetry::OtlpSettings;
use clarion_runtime::{BrokerSettings, DatabaseSettings, LogSettings, ShutdownSettings, TlsSettings};

#[derive(Debug, Clone, Parser)]
#[command(
    name = "clarion-harvester",
    version,
    args_override_self = true,
    about = "Clarion harvester: claims shard jobs, streams their audience from PostgreSQL \
             and publishes per-platform token batches"
)]
pub struct Settings {
    /// Address of the health endpoints (/healthz, /readyz).
    #[arg(
        long = "http-addr",
        env = "CLARION_HTTP_ADDR",
        default_value = "127.0.0.1:8081"
    )]
    pub http_addr: SocketAddr,

    /// Harvest actors in this process; each works on one shard job at a time.
    #[arg(
        long = "harvest-workers",
        env = "CLARION_HARVEST_WORKERS",
        default_value_t = 4,
        value_parser = clap::value_parser!(u16).range(1..=256)
    )]
    pub workers: u16,

    /// Shard jobs each harvest actor takes from the broker ahead of time.
    #[arg(
        long = "harvest-prefetch",
        env = "CLARION_HARVEST_PREFETCH",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..=100)
    )]
    pub prefetch: u16,

    /// Tokens per token batch (one dispatcher message), at most: batches
    /// are cut per platform within a job. 2,000 instead of 1,000 took 42%
    /// of the broker's messages away (RabbitMQ 1.64-1.98 against
    /// 2.12-2.19 µs of CPU a push, `load-tests/results/overhead/batch-2000`);
    /// with the dispatchers' 2 workers, what a dispatcher holds
    /// unacknowledged stays at 4,000 tokens.
    #[arg(
        long = "batch-size",
        env = "CLARION_BATCH_SIZE",
        default_value_t = 2000,
        value_parser = clap::value_parser!(u32).range(1..=10_000)
    )]
    pub batch_size: u32,

    /// Token batches of one job published but not yet confirmed at a time.
    #[arg(
        long = "harvest-publish-window",
        env = "CLARION_HARVEST_PUBLISH_WINDOW",
        default_value_t = 64,
        value_parser = clap::value_parser!(u32).range(1..=10_000)
    )]
    pub publish_window: u32,

    /// Pause before a failed job goes back to the queue, doubled with each
    /// attempt (in milliseconds).
    #[arg(
        long = "harvest-retry-delay-ms",
        env = "CLARION_HARVEST_RETRY_DELAY_MS",
        default_value_t = 1000
    )]
    pub retry_delay_ms: u64,

    #[command(flatten)]
    pub database: DatabaseSettings,

    /// A replica (streaming standby) to stream the harvest from; the ledger
    /// and every write stay on `--database-url`. A job is read from the
    /// replica once it has replayed the primary's position the job
    /// carries, else from the primary.
    #[arg(
        long = "harvest-database-url",
        value_name = "URL",
        env = "CLARION_HARVEST_DATABASE_URL",
        hide_env_values = true
    )]
    pub harvest_database_url: Option<String>,

    /// How long a job waits for the replica to replay the primary's
    /// position before it is read from the primary (in milliseconds).
    #[arg(
        long = "harvest-replica-wait-ms",
        env = "CLARION_HARVEST_REPLICA_WAIT_MS",
        default_value_t = 2000,
        value_parser = clap::value_parser!(u64).range(0..=60_000)
    )]
    pub replica_wait_ms: u64,

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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Settings::command().debug_assert();
    }
}
