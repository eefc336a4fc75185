//! Clarion's dispatcher. Today it connects to RabbitMQ and reports its
//! readiness; the batch consumer and the APNs / FCM senders arrive with the
//! delivery issue. Dispatchers never touch the database.

pub mod config;

use clarion_runtime::BrokerLink;
use clarion_runtime::health::{HealthServer, Readiness};
use tracing::info;

pub use crate::config::Settings;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot serve the health endpoints: {0}")]
    Http(#[from] std::io::Error),
}

/// A running dispatcher.
pub struct Dispatcher {
    pub health: HealthServer,
}

/// Opens the broker link and serves the health endpoints. Must run inside an
/// actix `System`.
pub async fn start(settings: Settings) -> Result<Dispatcher, StartError> {
    let name = format!("clarion-dispatcher-{}", settings.platform);
    let broker = BrokerLink::spawn(settings.broker.url.clone(), name);
    let health = HealthServer::start(settings.http_addr, Readiness::new(None, Some(broker)))?;
    info!(addr = %health.addr, platform = %settings.platform, "dispatcher health endpoints listening");
    Ok(Dispatcher { health })
}
