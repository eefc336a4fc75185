//! `clarion-coordinator`: see `--help` for its settings.

use clap::Parser;
use clarion_coordinator::Settings;
use clarion_runtime::telemetry;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let settings = Settings::parse();
    let telemetry = telemetry::init(
        &settings.log,
        &settings.otlp,
        vec![clarion_coordinator::trace_service()],
    )
    .map_err(anyhow::Error::msg)?;
    clarion_runtime::metrics::install();
    let coordinator = clarion_coordinator::start(settings).await?;
    clarion_runtime::shutdown::signal().await;
    coordinator.stop().await;
    telemetry.shutdown();
    Ok(())
}
