//! Clarion's harvester. Today it connects to PostgreSQL and RabbitMQ and
//! reports its readiness; the shard-job consumer and harvest actors arrive
//! with the send path.

pub mod config;

use clarion_runtime::health::{HealthServer, Readiness};
use clarion_runtime::{BrokerLink, db};
use tracing::info;

pub use crate::config::Settings;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Database(#[from] db::DbError),
    #[error("cannot serve the health endpoints: {0}")]
    Http(#[from] std::io::Error),
}

/// A running harvester.
pub struct Harvester {
    pub health: HealthServer,
}

/// Opens the database pool and the broker link and serves the health
/// endpoints. Must run inside an actix `System`.
pub async fn start(settings: Settings) -> Result<Harvester, StartError> {
    let pool = db::pool(&settings.database, "clarion-harvester")?;
    let broker = BrokerLink::spawn(settings.broker.url.clone(), "clarion-harvester".into());
    let health = HealthServer::start(settings.http_addr, Readiness::new(Some(pool), Some(broker)))?;
    info!(addr = %health.addr, "harvester health endpoints listening");
    Ok(Harvester { health })
}
