//! `clarion-mock-apns`: a mock of Apple's push service on 127.0.0.1 (see `--help`).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::bail;
use clap::Parser;
use clarion_load_tests::mocks::{ApnsMock, ApnsMockConfig, ReceiptsArgs};

#[derive(Parser)]
#[command(
    name = "clarion-mock-apns",
    about = "Mock APNs: HTTP/2 over TLS with provider-token checks, Apple's answers, fault injection \
             and a control API. Writes its CA certificate and .p8 key to --dir. With --receipts-url \
             the phones behind it post receipts for the pushes it accepted."
)]
struct Args {
    /// Push API address (loopback only).
    #[arg(long, default_value = "127.0.0.1:2197")]
    addr: SocketAddr,
    /// Control API address (loopback only).
    #[arg(long, default_value = "127.0.0.1:2198")]
    control_addr: SocketAddr,
    /// Where the CA certificate and the AuthKey .p8 are written.
    #[arg(long, default_value = "mock-credentials")]
    dir: PathBuf,
    #[arg(long, default_value = "CLARIONTM1")]
    team_id: String,
    #[arg(long, default_value = "CLARIONK01")]
    key_id: String,
    #[arg(long, default_value = "com.clarion.news")]
    bundle_id: String,
    /// Server threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The phones behind the mock: receipts for the accepted pushes.
    #[command(flatten)]
    receipts: ReceiptsArgs,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.addr.ip().is_loopback() || !args.control_addr.ip().is_loopback() {
        bail!("the mock binds to loopback addresses only");
    }
    let receipts = args.receipts.config()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut config = ApnsMockConfig::local(args.dir);
        config.receipts = receipts;
        config.addr = args.addr;
        config.control_addr = args.control_addr;
        config.team_id = args.team_id;
        config.key_id = args.key_id;
        config.bundle_id = args.bundle_id;
        let mock = ApnsMock::start(config).await?;
        println!("mock APNs on {} (control API {})", mock.endpoint, mock.control);
        for (name, value) in mock.env() {
            println!("{name}={value}");
        }
        println!("CLARION_EXTRA_CA_FILE={}", mock.ca_file.display());
        tokio::signal::ctrl_c().await?;
        Ok(())
    })
}
