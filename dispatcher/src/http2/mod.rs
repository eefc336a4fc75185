//! Clarion's own HTTP/2 client transport: a pool of persistent TLS
//! connections to one origin (`h2` over rustls), many concurrent streams on
//! each, re-opened when they break. Both the APNs and the FCM channels use
//! it; the benchmark's ceiling client uses it too.

mod coalesce;
mod pool;
mod tls;

pub use pool::{Http2Pool, Liveness, PoolError, PoolLimits, Response, TransportError};
pub use tls::TlsError;
pub use tls::client_config;
