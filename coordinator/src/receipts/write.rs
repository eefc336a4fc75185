//! One receipts request as a write of the group commit
//! (`crate::group_commit`): counted by [`record`] inside the batch's
//! transaction, its counter updates on the batch worker's own slot, so two
//! batches in flight never wait on one counter row.

use chrono::{DateTime, Utc};

use super::body::Receipt;
use super::record::{Outcome, Request, SLOTS, record};
use crate::auth::Caller;
use crate::group_commit::{BatchContext, BatchWrite};
use crate::store::StoreError;
use crate::store::prepared::Prepared;

/// The receipts of one request, with what they are judged by.
pub struct ReceiptWrite {
    pub receipts: Vec<Receipt>,
    /// The arrival of the request (receipt times are clamped to it).
    pub now: DateTime<Utc>,
    /// The detail retention's cutoff (older notifications are ignored).
    pub cutoff: Option<DateTime<Utc>>,
    /// The key's apps rule (receipts of other apps are ignored).
    pub caller: Caller,
    /// Added to the worker's index to choose the counter slot, so replicas
    /// spread over the slots too.
    pub slot_offset: i16,
    /// The request's arrival number: every receipts request is its own key.
    pub arrival: u64,
}

impl BatchWrite for ReceiptWrite {
    type Output = Outcome;
    /// Its own: every request of a batch is in its first round, recorded
    /// together ([`record`]) as if one after the other in arrival order.
    type Key = u64;
    const KIND: &'static str = "receipts";

    fn rows(&self) -> usize {
        self.receipts.len().max(1)
    }

    fn order_key(&self) -> u64 {
        self.arrival
    }

    async fn apply_round(
        writes: &[&Self],
        tx: &Prepared<'_>,
        batch: BatchContext,
    ) -> Result<Vec<Outcome>, StoreError> {
        let checks: Vec<_> = writes
            .iter()
            .map(|write| move |app: &str| write.caller.check_app(app).is_ok())
            .collect();
        let requests: Vec<Request<'_>> = writes
            .iter()
            .zip(&checks)
            .map(|(write, may_use_app)| Request {
                receipts: &write.receipts,
                now: write.now,
                cutoff: write.cutoff,
                may_use_app,
                slot: ((batch.worker % SLOTS as usize) as i16 + write.slot_offset) % SLOTS,
            })
            .collect();
        record(tx, &requests).await
    }
}
