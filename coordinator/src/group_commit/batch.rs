//! One worker of a group commit: take a batch from the queue, apply it in
//! one transaction, commit once, then answer every request of it.
//!
//! First pass: every write in one transaction, no savepoints (the cheap
//! case). If any write fails, that transaction is rolled back and the
//! batch runs again, each write in its own savepoint: a write the database
//! refuses is rolled back alone and fails alone, the others commit. A
//! commit that fails (or a connection that breaks) fails the whole batch
//! with [`WriteError::Batch`] (503: nothing of it may be relied on).

use std::sync::Arc;

use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use tokio::sync::{Mutex, mpsc};
use tokio::time::Instant;
use tracing::warn;

use super::write::{BatchContext, BatchWrite, Bounds, Pending, WriteError};
use crate::metrics::{WRITE_BATCH_REQUESTS, WRITE_BATCH_RETRIES, WRITE_BATCHES};
use crate::store::StoreError;

/// The queue's receiving end, shared by a kind's workers: the one holding
/// it collects the next batch while the others write theirs.
pub(crate) struct Intake<W: BatchWrite> {
    queue: mpsc::Receiver<Pending<W>>,
    /// A write taken that did not fit in the last batch: the next one's first.
    held: Option<Pending<W>>,
}

impl<W: BatchWrite> Intake<W> {
    pub(crate) fn new(queue: mpsc::Receiver<Pending<W>>) -> Self {
        Self { queue, held: None }
    }

    /// The next batch: the first write waiting (waits for one), then what
    /// comes within `bounds.wait`, up to `bounds.batch_rows` rows. `None`
    /// once the queue is closed and empty.
    async fn next_batch(&mut self, bounds: &Bounds) -> Option<Vec<Pending<W>>> {
        let first = match self.held.take() {
            Some(first) => first,
            None => self.queue.recv().await?,
        };
        let mut rows = first.write.rows();
        let mut batch = vec![first];
        let deadline = Instant::now() + bounds.wait;
        while rows < bounds.batch_rows {
            let next = match self.queue.try_recv() {
                Ok(next) => next,
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    match tokio::time::timeout_at(deadline, self.queue.recv()).await {
                        Ok(Some(next)) => next,
                        Ok(None) | Err(_) => break,
                    }
                }
            };
            if rows + next.write.rows() > bounds.batch_rows {
                self.held = Some(next);
                break;
            }
            rows += next.write.rows();
            batch.push(next);
        }
        Some(batch)
    }
}

/// A worker: batches until the queue closes (or the task is aborted).
pub(crate) async fn work<W: BatchWrite>(
    worker: usize,
    pool: PgPool,
    intake: Arc<Mutex<Intake<W>>>,
    bounds: Bounds,
) {
    loop {
        let batch = {
            let mut intake = intake.lock().await;
            match intake.next_batch(&bounds).await {
                Some(batch) => batch,
                None => return,
            }
        };
        run(&pool, batch, BatchContext { worker }, &bounds).await;
    }
}

/// Applies and commits one batch, then answers each of its requests.
async fn run<W: BatchWrite>(
    pool: &PgPool,
    mut batch: Vec<Pending<W>>,
    context: BatchContext,
    bounds: &Bounds,
) {
    // A request that gave up (deadline, client gone) was not acknowledged
    // and waits for nothing: its write is left out.
    batch.retain(|pending| !pending.reply.is_closed());
    if batch.is_empty() {
        return;
    }
    // Stable: writes of one key keep their arrival order.
    batch.sort_by_key(|pending| pending.write.order_key());
    WRITE_BATCHES.with([W::KIND]).increment(1);
    WRITE_BATCH_REQUESTS.with([W::KIND]).record(batch.len() as f64);
    let writes: Vec<&W> = batch.iter().map(|pending| &pending.write).collect();
    let results = match tokio::time::timeout(bounds.batch_deadline, apply(pool, &writes, context)).await {
        Ok(results) => results,
        Err(_) => {
            warn!(
                kind = W::KIND,
                writes = writes.len(),
                "a write batch took too long; rolled back"
            );
            writes
                .iter()
                .map(|_| Err(WriteError::Batch("the database did not answer in time".into())))
                .collect()
        }
    };
    for (pending, result) in batch.into_iter().zip(results) {
        // The requester may have given up meanwhile; nothing to tell then.
        let _ = pending.reply.send(result);
    }
}

/// One result per write, in `writes` order.
async fn apply<W: BatchWrite>(
    pool: &PgPool,
    writes: &[&W],
    context: BatchContext,
) -> Vec<Result<W::Output, WriteError>> {
    match together(pool, writes, context).await {
        Ok(Ok(outputs)) => outputs.into_iter().map(Ok).collect(),
        Ok(Err(Refusal)) => {
            WRITE_BATCH_RETRIES.with([W::KIND]).increment(1);
            match one_by_one(pool, writes, context).await {
                Ok(results) => results,
                Err(err) => everyone(writes.len(), &err),
            }
        }
        Err(err) => everyone(writes.len(), &err),
    }
}

/// A write of the first pass failed; the pass was rolled back.
struct Refusal;

/// Every write in one transaction, no savepoints, set-based: the writes
/// of one round (at most one per key) are applied together
/// ([`BatchWrite::apply_round`], a fixed number of statements); rounds run
/// one after the other, so writes of one key stay in arrival order.
/// `Ok(Err(Refusal))`: a round failed and nothing was committed; `Err`:
/// the transaction itself failed (connection, commit).
async fn together<W: BatchWrite>(
    pool: &PgPool,
    writes: &[&W],
    context: BatchContext,
) -> Result<Result<Vec<W::Output>, Refusal>, StoreError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    let mut outputs: Vec<Option<W::Output>> = writes.iter().map(|_| None).collect();
    for round in rounds(writes) {
        let members: Vec<&W> = round.iter().map(|&index| writes[index]).collect();
        match W::apply_round(&members, &tx, context).await {
            Ok(applied) if applied.len() == round.len() => {
                for (index, output) in round.into_iter().zip(applied) {
                    outputs[index] = Some(output);
                }
            }
            Ok(_) | Err(_) => {
                tx.rollback().await?;
                return Ok(Err(Refusal));
            }
        }
    }
    tx.commit().await?;
    Ok(Ok(outputs.into_iter().flatten().collect()))
}

/// The writes (sorted by key) cut into rounds: round `r` holds the `r`-th
/// write of every key, in order.
fn rounds<W: BatchWrite>(writes: &[&W]) -> Vec<Vec<usize>> {
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    let mut nth = 0;
    for (index, write) in writes.iter().enumerate() {
        let same_key = index > 0 && writes[index - 1].order_key() == write.order_key();
        nth = if same_key { nth + 1 } else { 0 };
        if rounds.len() <= nth {
            rounds.push(Vec::new());
        }
        rounds[nth].push(index);
    }
    rounds
}

/// Every write in its own savepoint of one transaction: a refused write
/// is rolled back alone. `Err`: the transaction itself failed.
async fn one_by_one<W: BatchWrite>(
    pool: &PgPool,
    writes: &[&W],
    context: BatchContext,
) -> Result<Vec<Result<W::Output, WriteError>>, StoreError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let mut tx = conn.transaction().await?;
    let mut results = Vec::with_capacity(writes.len());
    for write in writes {
        let savepoint = tx.savepoint("group_commit_write").await?;
        let applied = W::apply_round(&[*write], &savepoint, context).await;
        match applied.map(|outputs| outputs.into_iter().next()) {
            Ok(Some(output)) => {
                savepoint.commit().await?;
                results.push(Ok(output));
            }
            Ok(None) => {
                savepoint.rollback().await?;
                results.push(Err(WriteError::Refused(StoreError::Corrupt(
                    "a write applied alone gave no answer".into(),
                ))));
            }
            Err(err) => {
                savepoint.rollback().await?;
                results.push(Err(WriteError::Refused(err)));
            }
        }
    }
    tx.commit().await?;
    Ok(results)
}

/// The same failure for every write of a batch.
fn everyone<T>(writes: usize, err: &StoreError) -> Vec<Result<T, WriteError>> {
    let detail = err.to_string();
    (0..writes)
        .map(|_| Err(WriteError::Batch(detail.clone())))
        .collect()
}
