//! What the group commit batches and how: the [`BatchWrite`] trait a kind
//! of write implements, the bounds of its batches, its errors, and a write
//! waiting with its answer's way back.

use std::future::Future;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, oneshot};

use crate::store::StoreError;
use crate::store::prepared::Prepared;

/// One kind of write the group commit batches.
pub trait BatchWrite: Send + Sync + 'static {
    /// What the request is answered with.
    type Output: Send + 'static;
    /// Writes with equal keys apply in their arrival order, one after the
    /// other (in successive rounds); writes of different keys share a
    /// round and are applied together by one set of statements. A batch
    /// applies its writes sorted by key, so concurrent batches take their
    /// locks in one order.
    type Key: Ord;
    /// The kind's metric label (fixed).
    const KIND: &'static str;

    /// Rows this write takes in the queue and in a batch (at least 1).
    fn rows(&self) -> usize;

    fn order_key(&self) -> Self::Key;

    /// Applies one round of writes inside the batch's transaction, through
    /// its connection's prepared statements (at most one write per key,
    /// sorted by key) and returns one output per write, in order; commits
    /// nothing. A kind applies a round with a fixed number of statements
    /// (set-based, over arrays), not a few per write. An error fails the
    /// whole round: the batch is rolled back and run again with each write
    /// alone (a round of one) in its own savepoint.
    fn apply_round(
        writes: &[&Self],
        tx: &Prepared<'_>,
        batch: BatchContext,
    ) -> impl Future<Output = Result<Vec<Self::Output>, StoreError>> + Send;
}

/// What the writes of one batch know of it.
#[derive(Debug, Clone, Copy)]
pub struct BatchContext {
    /// The worker running the batch (0 to in-flight bound − 1): no two
    /// batches in flight at once share it.
    pub worker: usize,
}

/// How batches are bounded.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Rows waiting or being written, per kind; beyond: 503 at once.
    pub queue_rows: usize,
    /// Most rows in one batch (a batch always takes at least one write).
    pub batch_rows: usize,
    /// Longest a batch waits for more writes once it has one.
    pub wait: Duration,
    /// Batch transactions at once, per kind.
    pub in_flight: usize,
    /// Longest one batch may take (both passes) before it is rolled back.
    pub batch_deadline: Duration,
}

/// Why a write was not committed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The queue holds its bound of rows; retry later.
    #[error("too many writes waiting to be committed; retry after Retry-After")]
    Full,
    /// Not committed within the request deadline (10 s).
    #[error("the write was not committed in time; retry")]
    TimedOut,
    /// The coordinator is stopping.
    #[error("the writer is stopping; retry")]
    Stopped,
    /// The database refused this write (or its domain rule did).
    #[error(transparent)]
    Refused(StoreError),
    /// The batch's transaction failed as a whole (connection, commit):
    /// nothing of it may be relied on.
    #[error("the batch was not committed ({0}); retry")]
    Batch(String),
}

/// A write waiting for its batch, and where its answer goes.
pub(crate) struct Pending<W: BatchWrite> {
    pub(crate) write: W,
    pub(crate) reply: oneshot::Sender<Result<W::Output, WriteError>>,
    /// Its rows of the queue's bound, given back when it is answered.
    pub(crate) _rows: OwnedSemaphorePermit,
}
