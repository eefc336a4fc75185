//! `clarion-mock-fcm`: a mock of FCM's HTTP v1 API and Google's OAuth2 token
//! endpoint on 127.0.0.1 (see `--help`).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::bail;
use clap::Parser;
use clarion_load_tests::mocks::{FcmMock, FcmMockConfig, ReceiptsArgs};

#[derive(Parser)]
#[command(
    name = "clarion-mock-fcm",
    about = "Mock FCM: HTTP v1 send API over HTTP/2 + TLS, an OAuth2 token endpoint, Google's error \
             bodies, fault injection and a control API. Writes its CA certificate and a matching \
             service-account JSON to --dir. With --receipts-url the phones behind it post receipts for \
             the messages it accepted."
)]
struct Args {
    /// Send API address (loopback only).
    #[arg(long, default_value = "127.0.0.1:2199")]
    addr: SocketAddr,
    /// OAuth2 token endpoint address (loopback only).
    #[arg(long, default_value = "127.0.0.1:2200")]
    token_addr: SocketAddr,
    /// Control API address (loopback only).
    #[arg(long, default_value = "127.0.0.1:2201")]
    control_addr: SocketAddr,
    /// Where the CA certificate and the service-account JSON are written.
    #[arg(long, default_value = "mock-credentials")]
    dir: PathBuf,
    #[arg(long, default_value = "clarion-news")]
    project_id: String,
    /// Lifetime of issued access tokens, in seconds.
    #[arg(long, default_value_t = 3600)]
    token_lifetime_secs: u64,
    /// Server threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The phones behind the mock: receipts for the accepted pushes.
    #[command(flatten)]
    receipts: ReceiptsArgs,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let loopback = [args.addr, args.token_addr, args.control_addr];
    if !loopback.iter().all(|addr| addr.ip().is_loopback()) {
        bail!("the mock binds to loopback addresses only");
    }
    let receipts = args.receipts.config()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut config = FcmMockConfig::local(args.dir);
        config.receipts = receipts;
        config.addr = args.addr;
        config.token_addr = args.token_addr;
        config.control_addr = args.control_addr;
        config.project_id = args.project_id;
        config.token_lifetime = std::time::Duration::from_secs(args.token_lifetime_secs);
        let mock = FcmMock::start(config).await?;
        println!(
            "mock FCM on {} (tokens {}, control API {})",
            mock.endpoint, mock.token_uri, mock.control
        );
        for (name, value) in mock.env() {
            println!("{name}={value}");
        }
        println!("CLARION_EXTRA_CA_FILE={}", mock.ca_file.display());
        tokio::signal::ctrl_c().await?;
        Ok(())
    })
}
