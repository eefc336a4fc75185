//! `clarion-harvester`: see `--help` for its settings.

use clap::Parser;
use clarion_harvester::Settings;
use clarion_runtime::telemetry;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let settings = Settings::parse();
    let telemetry = telemetry::init(
        &settings.log,
        &settings.otlp,
        vec![clarion_harvester::trace_service()],
    )
    .map_err(anyhow::Error::msg)?;
    clarion_runtime::metrics::install();
    let harvester = clarion_harvester::start(settings).await?;
    clarion_runtime::shutdown::signal().await;
    harvester.stop().await;
    telemetry.shutdown();
    Ok(())
}
