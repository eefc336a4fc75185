//! `clarion-dispatcher --platform ios|android`: see `--help` for its settings.

use clap::Parser;
use clarion_dispatcher::Settings;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let settings = Settings::parse();
    clarion_runtime::telemetry::init_logging(&settings.log).map_err(anyhow::Error::msg)?;
    let dispatcher = clarion_dispatcher::start(settings).await?;
    clarion_runtime::shutdown::signal().await;
    dispatcher.stop().await;
    Ok(())
}
