//! The harvester's settings (`clarion-harvester --help` lists them).

use std::net::SocketAddr;

use clap::Parser;
use clarion_runtime::{BrokerSettings, DatabaseSettings, LogSettings};

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

    #[command(flatten)]
    pub database: DatabaseSettings,

    #[command(flatten)]
    pub broker: BrokerSettings,

    #[command(flatten)]
    pub log: LogSettings,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Settings::command().debug_assert();
    }
}
