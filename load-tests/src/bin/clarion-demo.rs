//! `clarion-demo`: see `--help`.

use clap::Parser;
use clarion_load_tests::demo::{DemoArgs, run};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    run(DemoArgs::parse()).await
}
