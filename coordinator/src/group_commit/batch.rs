//! One worker of a group commit: take a batch from the queue, apply it in
//! one transaction, commit once, then answer every request of it.
//!
//! First pass: every write in one transaction, no savepoints (the cheap
//! case). If any write fails, that transaction is rolled back and the
//! batch runs again, each write in its own savepoint: a write the database
//! refuses is rolled back alone and fails alone, the others commit. A
//! commit that fails (or a connection that breaks) fails the whole batch
//! with [`WriteError::Batch`] (503: nothing of it may be relied on).
//!
//! A worker keeps its connection from one batch to the next while writes
//! keep coming (`Held`), with the statements it prepared on it: no pool
//! check-out (and its health check) and no statement prepared anew per
//! batch. It gives the connection back to the pool after
//! [`IDLE_RELEASE`] without a batch, and after any batch that failed (a
//! broken connection, or a statement the database no longer accepts, is
//! not kept).

use std::sync::Arc;
use std::time::Duration;

use clarion_runtime::PgPool;
use clarion_runtime::db::{DbError, Manager};
use tokio::sync::{Mutex, mpsc};
use tokio::time::Instant;
use tracing::warn;

use super::write::{BatchContext, BatchWrite, Bounds, Pending, WriteError};
use crate::metrics::{WRITE_BATCH_REQUESTS, WRITE_BATCH_RETRIES, WRITE_BATCHES};
use crate::store::StoreError;
use crate::store::prepared::{Prepared, StatementCache};

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

    /// The next batch: the first write waiting (waits for one, at most
    /// `idle` when given), then what comes within `bounds.wait`, up to
    /// `bounds.batch_rows` rows.
    async fn next_batch(&mut self, bounds: &Bounds, idle: Option<Duration>) -> Next<W> {
        let first = match self.held.take() {
            Some(first) => first,
            None => {
                // `recv` is cancel safe: a write is either taken or left queued.
                let received = match idle {
                    Some(idle) => match tokio::time::timeout(idle, self.queue.recv()).await {
                        Ok(received) => received,
                        Err(_) => return Next::Idle,
                    },
                    None => self.queue.recv().await,
                };
                match received {
                    Some(first) => first,
                    None => return Next::Closed,
                }
            }
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
        Next::Batch(batch)
    }
}

/// What a worker waiting for writes gets.
enum Next<W: BatchWrite> {
    Batch(Vec<Pending<W>>),
    /// Nothing came within the idle bound.
    Idle,
    /// The queue is closed and empty.
    Closed,
}

/// How long a worker keeps its connection without a batch to write.
pub const IDLE_RELEASE: Duration = Duration::from_secs(1);

/// A worker's connection, taken from the pool, with the statements
/// prepared on it.
pub(crate) struct Held {
    conn: bb8::PooledConnection<'static, Manager>,
    statements: StatementCache,
}

impl Held {
    async fn take(pool: &PgPool) -> Result<Self, StoreError> {
        Ok(Self {
            conn: pool.get_owned().await.map_err(DbError::from)?,
            statements: StatementCache::default(),
        })
    }
}

/// A worker: batches until the queue closes (or the task is aborted).
pub(crate) async fn work<W: BatchWrite>(
    worker: usize,
    pool: PgPool,
    intake: Arc<Mutex<Intake<W>>>,
    bounds: Bounds,
) {
    let mut held: Option<Held> = None;
    loop {
        // A worker holding a connection waits for writes at most
        // IDLE_RELEASE (for its turn at the intake, then for a write), then
        // gives the connection back.
        let idle = held.as_ref().map(|_| IDLE_RELEASE);
        let next = {
            let mut intake = match idle {
                Some(idle) => match tokio::time::timeout(idle, intake.lock()).await {
                    Ok(intake) => intake,
                    Err(_) => {
                        held = None;
                        continue;
                    }
                },
                None => intake.lock().await,
            };
            intake.next_batch(&bounds, idle).await
        };
        match next {
            Next::Batch(batch) => {
                let clean = run(&pool, &mut held, batch, BatchContext { worker }, &bounds).await;
                if !clean {
                    held = None;
                }
            }
            Next::Idle => held = None,
            Next::Closed => return,
        }
    }
}

/// Applies and commits one batch, then answers each of its requests;
/// whether every write of it was committed at the first pass.
async fn run<W: BatchWrite>(
    pool: &PgPool,
    held: &mut Option<Held>,
    mut batch: Vec<Pending<W>>,
    context: BatchContext,
    bounds: &Bounds,
) -> bool {
    // A request that gave up (deadline, client gone) was not acknowledged
    // and waits for nothing: its write is left out.
    batch.retain(|pending| !pending.reply.is_closed());
    if batch.is_empty() {
        return true;
    }
    // Stable: writes of one key keep their arrival order.
    batch.sort_by_key(|pending| pending.write.order_key());
    WRITE_BATCHES.with([W::KIND]).increment(1);
    WRITE_BATCH_REQUESTS.with([W::KIND]).record(batch.len() as f64);
    let writes: Vec<&W> = batch.iter().map(|pending| &pending.write).collect();
    let (results, clean) =
        match tokio::time::timeout(bounds.batch_deadline, apply(pool, held, &writes, context)).await {
            Ok(applied) => applied,
            Err(_) => {
                warn!(
                    kind = W::KIND,
                    writes = writes.len(),
                    "a write batch took too long; rolled back"
                );
                let results = writes
                    .iter()
                    .map(|_| Err(WriteError::Batch("the database did not answer in time".into())))
                    .collect();
                (results, false)
            }
        };
    for (pending, result) in batch.into_iter().zip(results) {
        // The requester may have given up meanwhile; nothing to tell then.
        let _ = pending.reply.send(result);
    }
    clean
}

/// One result per write, in `writes` order, and whether the first pass
/// committed them all.
async fn apply<W: BatchWrite>(
    pool: &PgPool,
    held: &mut Option<Held>,
    writes: &[&W],
    context: BatchContext,
) -> (Vec<Result<W::Output, WriteError>>, bool) {
    let conn = match held {
        Some(conn) => conn,
        None => match Held::take(pool).await {
            Ok(taken) => held.insert(taken),
            Err(err) => return (everyone(writes.len(), &err), false),
        },
    };
    let results = match together(conn, writes, context).await {
        Ok(Ok(outputs)) => return (outputs.into_iter().map(Ok).collect(), true),
        Ok(Err(Refusal)) => {
            WRITE_BATCH_RETRIES.with([W::KIND]).increment(1);
            match one_by_one(conn, writes, context).await {
                Ok(results) => results,
                Err(err) => everyone(writes.len(), &err),
            }
        }
        Err(err) => everyone(writes.len(), &err),
    };
    (results, false)
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
    held: &mut Held,
    writes: &[&W],
    context: BatchContext,
) -> Result<Result<Vec<W::Output>, Refusal>, StoreError> {
    let tx = held.conn.transaction().await?;
    let prepared = Prepared::new(&tx, &held.statements);
    let mut outputs: Vec<Option<W::Output>> = writes.iter().map(|_| None).collect();
    for round in rounds(writes) {
        let members: Vec<&W> = round.iter().map(|&index| writes[index]).collect();
        match W::apply_round(&members, &prepared, context).await {
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
    held: &mut Held,
    writes: &[&W],
    context: BatchContext,
) -> Result<Vec<Result<W::Output, WriteError>>, StoreError> {
    let mut tx = held.conn.transaction().await?;
    let mut results = Vec::with_capacity(writes.len());
    for write in writes {
        let savepoint = tx.savepoint("group_commit_write").await?;
        let applied = W::apply_round(&[*write], &Prepared::new(&savepoint, &held.statements), context).await;
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
