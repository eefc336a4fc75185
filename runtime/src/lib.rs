//! Plumbing shared by the coordinator, the harvesters and the dispatchers:
//! RabbitMQ (`amqp/`), the bounded PostgreSQL pool, TLS to both (`tls/`,
//! `pg_connect`), common settings, the health and metrics endpoints, log
//! and trace set-up, and throw-away test databases and namespaces. Kept small on purpose: anything that belongs
//! to one stage lives in that stage's crate.

pub mod amqp;
pub mod apps;
pub mod backoff;
pub mod db;
pub mod health;
pub mod metrics;
pub mod pg_connect;
pub mod recent;
pub mod settings;
pub mod shutdown;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;

pub use amqp::broker::BrokerLink;
pub use db::PgPool;
pub use settings::{BrokerSettings, DatabaseSettings, LogSettings, ShutdownSettings, TlsSettings};
pub use tls::Trust;
