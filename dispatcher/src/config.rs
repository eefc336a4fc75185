//! The dispatcher's settings (`clarion-dispatcher --help` lists them).

use std::net::SocketAddr;

use clap::Parser;
use clarion_proto::Platform;
use clarion_runtime::{BrokerSettings, LogSettings};

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
    #[arg(long, env = "CLARION_PLATFORM", value_parser = parse_platform)]
    pub platform: Platform,

    /// Address of the health endpoints (/healthz, /readyz).
    #[arg(
        long = "http-addr",
        env = "CLARION_HTTP_ADDR",
        default_value = "127.0.0.1:8082"
    )]
    pub http_addr: SocketAddr,

    #[command(flatten)]
    pub broker: BrokerSettings,

    #[command(flatten)]
    pub log: LogSettings,
}

fn parse_platform(value: &str) -> Result<Platform, String> {
    value
        .parse()
        .map_err(|err: clarion_proto::TokenError| err.to_string())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Settings::command().debug_assert();
    }
}
