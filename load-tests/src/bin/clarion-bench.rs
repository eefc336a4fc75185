//! `clarion-bench`: Clarion's benchmarks (see `--help`).

use clap::{Parser, Subcommand};
use clarion_load_tests::bench::harvest::{HarvestArgs, run as harvest};
use clarion_load_tests::bench::mocks::{MocksArgs, run as mocks};
use clarion_load_tests::bench::run::{RunArgs, run as run_90in2};
use clarion_load_tests::seed::{SeedArgs, run as seed};

#[derive(Parser)]
#[command(
    name = "clarion-bench",
    about = "Clarion benchmarks against real processes on this machine"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Harvest rate and harvester memory for one large topic.
    Harvest(HarvestArgs),
    /// Requests per second the mock APNs and FCM serve, driven by h2load.
    Mocks(MocksArgs),
    /// Bulk-loads a synthetic audience with COPY.
    Seed(SeedArgs),
    /// The 90in2 benchmark: seed, cluster, send, ceiling, report and plot.
    Run(RunArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Warnings only: the mocks' libraries' debug and trace spans stay off.
    let _ = clarion_runtime::telemetry::init_logging(&clarion_runtime::LogSettings {
        format: clarion_runtime::settings::LogFormat::Text,
        filter: "warn".into(),
    });
    match Cli::parse().command {
        Command::Harvest(args) => harvest(args).await.map(|_| ()),
        Command::Mocks(args) => mocks(args).await.map(|_| ()),
        Command::Seed(args) => seed(args).await,
        Command::Run(args) => run_90in2(args).await.map(|_| ()),
    }
}
