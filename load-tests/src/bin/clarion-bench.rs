//! `clarion-bench`: Clarion's benchmarks (see `--help`).

use clap::{Parser, Subcommand};
use clarion_load_tests::bench::harvest::{HarvestArgs, run as harvest};

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Harvest(args) => harvest(args).await.map(|_| ()),
    }
}
