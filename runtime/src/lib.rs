//! Plumbing shared by the coordinator, the harvesters and the dispatchers:
//! common settings, the bounded PostgreSQL pool, the self-healing broker
//! link, the health endpoints and log set-up. Kept small on purpose: anything
//! that belongs to one stage lives in that stage's crate.

pub mod backoff;
pub mod broker;
pub mod consumer;
pub mod control;
pub mod db;
pub mod health;
pub mod message;
pub mod metrics;
pub mod publisher;
pub mod settings;
pub mod shutdown;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod topology;

pub use broker::BrokerLink;
pub use db::PgPool;
pub use settings::{BrokerSettings, DatabaseSettings, LogSettings, ShutdownSettings};
