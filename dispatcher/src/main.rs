//! `clarion-dispatcher --platform ios|android`: see `--help` for its settings.

use clap::Parser;
use clarion_dispatcher::Settings;
use clarion_runtime::telemetry;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let settings = Settings::parse();
    let service = clarion_dispatcher::trace_service(settings.platform);
    let telemetry =
        telemetry::init(&settings.log, &settings.otlp, vec![service]).map_err(anyhow::Error::msg)?;
    clarion_runtime::metrics::install();
    let dispatcher = clarion_dispatcher::start(settings).await?;
    clarion_runtime::shutdown::signal().await;
    dispatcher.stop().await;
    telemetry.shutdown();
    Ok(())
}
