//! Device receipts (issue 35): apps say which notifications their devices
//! received and opened (`POST /api/v1/receipts`); the coordinator counts
//! them per notification over its reporting audience (audience devices
//! whose registration says `receipts: true`) and shows the device-side
//! figures, curves and 90in2 beside the provider-side ones.
//!
//! - [`body`] reads a request, [`record`] counts it in one transaction,
//!   [`store`] is its SQL, [`bins`] the delay histogram's arithmetic,
//!   [`figures`] what the status and curve show, [`settle`] counts the
//!   reporting audience and stores the verdict once, [`api`] the endpoint,
//!   [`mod@write`] a request as a write of the group commit.

pub mod api;
pub mod bins;
pub mod body;
pub mod figures;
pub mod observe;
pub mod record;
pub mod settle;
pub mod store;
pub mod write;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use clarion_runtime::PgPool;

use crate::group_commit::GroupCommit;
use record::SLOTS;
use write::ReceiptWrite;

/// What the receipts endpoint shares.
pub struct ReceiptsState {
    pub pool: PgPool,
    /// The receipts' group commit: its bounded queue turns a request away
    /// (503) at once when full, and its workers — a part of the database
    /// pool — write batches of requests in one transaction each, so a
    /// flood of receipts never takes the connections the send path needs.
    pub writes: Arc<GroupCommit<ReceiptWrite>>,
    /// This replica's offset over the counter slots.
    pub slot_offset: i16,
    /// Numbers the requests (each its own key in a batch).
    pub arrivals: AtomicU64,
    /// The notification-detail retention (`None`: kept for ever).
    pub retention: Option<Duration>,
}

impl ReceiptsState {
    pub fn new(pool: PgPool, writes: Arc<GroupCommit<ReceiptWrite>>, retention: Option<Duration>) -> Self {
        Self {
            pool,
            writes,
            slot_offset: rand::random_range(0..SLOTS),
            arrivals: AtomicU64::new(0),
            retention,
        }
    }
}
