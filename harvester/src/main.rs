//! `clarion-harvester`: see `--help` for its settings.

use clap::Parser;
use clarion_harvester::Settings;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let settings = Settings::parse();
    clarion_runtime::telemetry::init_logging(&settings.log).map_err(anyhow::Error::msg)?;
    let harvester = clarion_harvester::start(settings).await?;
    clarion_runtime::shutdown::signal().await;
    harvester.stop().await;
    Ok(())
}
