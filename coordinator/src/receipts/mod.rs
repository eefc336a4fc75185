//! Device receipts (issue 35): apps say which notifications their devices
//! received and opened (`POST /api/v1/receipts`); the coordinator counts
//! them per notification over its reporting audience (audience devices
//! whose registration says `receipts: true`) and shows the device-side
//! figures, curves and 90in2 beside the provider-side ones.
//!
//! - [`body`] reads a request, [`record`] counts it in one transaction,
//!   [`store`] is its SQL, [`bins`] the delay histogram's arithmetic,
//!   [`figures`] what the status and curve show, [`settle`] counts the
//!   reporting audience and stores the verdict once, [`api`] the endpoint.

pub mod api;
pub mod bins;
pub mod body;
pub mod figures;
pub mod observe;
pub mod record;
pub mod settle;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use clarion_runtime::PgPool;
use tokio::sync::Semaphore;

/// What the receipts endpoint shares.
pub struct ReceiptsState {
    pub pool: PgPool,
    /// Receipt transactions allowed at once: half the database pool, so a
    /// flood of receipts never takes the connections the send path (plan,
    /// relay, reports) needs, and requests beyond it are answered 503 at
    /// once instead of waiting with their bodies in memory.
    pub permits: Arc<Semaphore>,
    /// The notification-detail retention (`None`: kept for ever).
    pub retention: Option<Duration>,
}

impl ReceiptsState {
    pub fn new(pool: PgPool, pool_size: u32, retention: Option<Duration>) -> Self {
        Self {
            pool,
            permits: Arc::new(Semaphore::new(in_flight_bound(pool_size))),
            retention,
        }
    }
}

/// Half the pool, at least one.
pub fn in_flight_bound(pool_size: u32) -> usize {
    (pool_size as usize / 2).max(1)
}
