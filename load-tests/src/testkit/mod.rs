//! An in-process Clarion cluster for end-to-end tests: the real
//! coordinator, harvesters and dispatchers (with the mock APNs and FCM)
//! against the machine's real PostgreSQL and RabbitMQ, in a throw-away
//! database and AMQP namespace (or on throw-away TLS servers,
//! `tls_servers`); a three-node RabbitMQ cluster for node loss
//! (`rabbit_cluster`); a PostgreSQL primary with a streaming standby
//! (`pg_standby`) that can take over as a synchronous standby
//! (`pg_failover`); and an OTLP receiver for trace tests.

mod channels;
mod cluster;
mod live_activities;
pub mod node_loss;
pub mod otlp;
pub mod pg_failover;
mod pg_server;
pub mod pg_standby;
pub mod rabbit_cluster;
mod scratch;
mod seed;
pub mod tls_servers;

pub use cluster::{
    ADMIN_KEY, APP_KEY, Cluster, ClusterOptions, ClusterServers, DESK_KEY, Mocks, WEB_PUSH_HOST,
};
pub use seed::{Device, alternating_devices, platforms_of, seed_devices};
