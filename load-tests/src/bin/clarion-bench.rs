//! `clarion-bench`: Clarion's benchmarks (see `--help`).

use clap::{Parser, Subcommand};
use clarion_load_tests::bench::harvest::{HarvestArgs, run as harvest};
use clarion_load_tests::bench::mocks::{MocksArgs, run as mocks};

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Harvest(args) => harvest(args).await.map(|_| ()),
        Command::Mocks(args) => mocks(args).await.map(|_| ()),
    }
}
