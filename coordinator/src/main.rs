//! `clarion-coordinator`: see `--help` for its settings.

use clap::Parser;
use clarion_coordinator::Settings;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let settings = Settings::parse();
    clarion_runtime::telemetry::init_logging(&settings.log).map_err(anyhow::Error::msg)?;
    let coordinator = clarion_coordinator::start(settings).await?;
    coordinator.wait().await?;
    Ok(())
}
