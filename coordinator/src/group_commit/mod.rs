//! Group commit of the app-facing writes (issue 36): concurrent
//! registration writes, and concurrent receipts, share transactions
//! instead of each waiting on its own WAL flush.
//!
//! A request hands its write to [`GroupCommit::submit`] and waits. A
//! fixed number of workers per kind (`CLARION_WRITE_BATCHES_IN_FLIGHT`,
//! part of the database pool) each take the writes waiting — at most
//! `CLARION_WRITE_BATCH_MAX_ROWS` rows, waiting at most
//! `CLARION_WRITE_BATCH_WAIT_MS` for more to come — apply them in one
//! transaction and commit once; every request of the batch is answered
//! only after that commit ([`batch`]). A write the database refuses fails
//! only its own request: the batch is rolled back and run again with each
//! write in its own savepoint.
//!
//! The queue is bounded in rows (`CLARION_WRITE_QUEUE_ROWS`, waiting and
//! being written): a write beyond it is refused at once ([`WriteError::Full`],
//! 503 with `Retry-After`), so a storm costs answers, never memory.

pub mod batch;
pub mod registrations;
#[cfg(test)]
mod set_based_tests;
pub mod write;

pub use write::{BatchContext, BatchWrite, Bounds, WriteError};

use std::sync::Arc;
use std::time::Duration;

use clarion_runtime::PgPool;
use tokio::sync::{Mutex, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::metrics::WRITE_SHED;
use write::Pending;

/// Longest a request waits for its write to be committed (queue and batch
/// together) before it is answered 503; the write may still be committed
/// later, and every write here is safe to repeat.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// The queue and the workers of one kind of write.
pub struct GroupCommit<W: BatchWrite> {
    queue: mpsc::Sender<Pending<W>>,
    rows: Arc<Semaphore>,
    queue_rows: usize,
    workers: Vec<JoinHandle<()>>,
}

impl<W: BatchWrite> GroupCommit<W> {
    /// Starts `bounds.in_flight` workers on the current tokio runtime.
    pub fn start(pool: PgPool, bounds: Bounds) -> Self {
        // Every write holds at least one row, so the channel never fills
        // before the row bound does: the row bound is the one that sheds.
        let (queue, receiver) = mpsc::channel(bounds.queue_rows.max(1));
        let intake = Arc::new(Mutex::new(batch::Intake::new(receiver)));
        let workers = (0..bounds.in_flight.max(1))
            .map(|worker| tokio::spawn(batch::work(worker, pool.clone(), intake.clone(), bounds)))
            .collect();
        crate::metrics::declare_write_kind(W::KIND);
        Self {
            queue,
            rows: Arc::new(Semaphore::new(bounds.queue_rows.max(1))),
            queue_rows: bounds.queue_rows.max(1),
            workers,
        }
    }

    /// Refuses ([`WriteError::Full`], counted as shed) when a write of one
    /// row would be refused now: lets a handler refuse before it reads a
    /// body.
    pub fn check_room(&self) -> Result<(), WriteError> {
        if self.rows.available_permits() == 0 {
            WRITE_SHED.with([W::KIND]).increment(1);
            return Err(WriteError::Full);
        }
        Ok(())
    }

    /// Queues `write` and waits until its batch is committed (or refused).
    pub async fn submit(&self, write: W) -> Result<W::Output, WriteError> {
        let rows = write.rows().clamp(1, self.queue_rows) as u32;
        let Ok(permit) = self.rows.clone().try_acquire_many_owned(rows) else {
            WRITE_SHED.with([W::KIND]).increment(1);
            return Err(WriteError::Full);
        };
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            write,
            reply,
            _rows: permit,
        };
        self.queue.try_send(pending).map_err(|err| match err {
            mpsc::error::TrySendError::Full(_) => {
                WRITE_SHED.with([W::KIND]).increment(1);
                WriteError::Full
            }
            mpsc::error::TrySendError::Closed(_) => WriteError::Stopped,
        })?;
        match tokio::time::timeout(REQUEST_DEADLINE, answer).await {
            Err(_) => Err(WriteError::TimedOut),
            Ok(Err(_)) => Err(WriteError::Stopped),
            Ok(Ok(result)) => result,
        }
    }

    /// Stops the workers (after the HTTP server has answered its requests).
    pub fn stop(&self) {
        for worker in &self.workers {
            worker.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    //! The batcher against the real PostgreSQL, with a write of its own: it
    //! appends `(key, value)` to a scratch table and answers with the id of
    //! the transaction that wrote it.

    use std::time::Duration;

    use clarion_runtime::testing::TestDatabase;
    use clarion_runtime::{PgPool, TlsSettings, Trust, db};
    use futures::future::join_all;

    use super::{BatchContext, BatchWrite, Bounds, GroupCommit, WriteError};
    use crate::store::StoreError;
    use crate::store::prepared::Prepared;
    use crate::store::sql::Sql;

    /// Appends a row; `value < 0` breaks the table's CHECK (a refusal).
    struct Append {
        key: u32,
        value: i64,
    }

    impl BatchWrite for Append {
        type Output = i64;
        type Key = u32;
        const KIND: &'static str = "test";

        fn rows(&self) -> usize {
            1
        }

        fn order_key(&self) -> u32 {
            self.key
        }

        async fn apply_round(
            writes: &[&Self],
            tx: &Prepared<'_>,
            _batch: BatchContext,
        ) -> Result<Vec<i64>, StoreError> {
            let keys: Vec<i64> = writes.iter().map(|write| i64::from(write.key)).collect();
            let values: Vec<i64> = writes.iter().map(|write| write.value).collect();
            let rows = tx
                .query(
                    "INSERT INTO appended (key, value)
                     SELECT key, value FROM unnest($1::bigint[], $2::bigint[]) AS w(key, value)
                     RETURNING txid_current()",
                    &[&keys, &values],
                )
                .await?;
            Ok(rows.iter().map(|row| row.get(0)).collect())
        }
    }

    fn bounds(in_flight: usize, wait_ms: u64, queue_rows: usize) -> Bounds {
        Bounds {
            queue_rows,
            batch_rows: 64,
            wait: Duration::from_millis(wait_ms),
            in_flight,
            batch_deadline: Duration::from_secs(30),
        }
    }

    async fn scratch() -> (TestDatabase, PgPool) {
        let db = TestDatabase::create().await;
        db.client()
            .await
            .batch_execute(
                "CREATE TABLE appended (seq bigserial PRIMARY KEY, key bigint NOT NULL,
                                        value bigint NOT NULL CHECK (value >= 0))",
            )
            .await
            .unwrap();
        let trust = Trust::load(&TlsSettings::default()).unwrap();
        let pool = db::pool(&db.settings(4), &trust, "group-commit-test").unwrap();
        (db, pool)
    }

    async fn stored(db: &TestDatabase) -> Vec<(i64, i64)> {
        db.client()
            .await
            .query("SELECT key, value FROM appended ORDER BY seq", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    }

    #[tokio::test]
    async fn concurrent_writes_share_transactions_and_each_is_answered_after_the_commit() {
        let (db, pool) = scratch().await;
        let writes = GroupCommit::start(pool, bounds(2, 20, 1000));
        let answers = join_all((0..200u32).map(|key| writes.submit(Append { key, value: 1 }))).await;
        let txids: std::collections::HashSet<i64> = answers
            .into_iter()
            .map(|answer| answer.expect("written"))
            .collect();
        assert_eq!(stored(&db).await.len(), 200, "every acknowledged write is stored");
        assert!(
            txids.len() < 200 / 4,
            "200 writes in {} transactions: they were not batched",
            txids.len()
        );
        writes.stop();
    }

    #[tokio::test]
    async fn a_write_the_database_refuses_fails_alone() {
        let (db, pool) = scratch().await;
        // One worker and a long wait: the writes surely share a batch.
        let writes = GroupCommit::start(pool, bounds(1, 200, 1000));
        let answers = join_all((0..20u32).map(|key| {
            let value = if key == 7 { -1 } else { i64::from(key) };
            writes.submit(Append { key, value })
        }))
        .await;
        for (key, answer) in answers.iter().enumerate() {
            match answer {
                Err(WriteError::Refused(err)) if key == 7 => {
                    assert!(!err.is_transient(), "a CHECK violation is final: {err}")
                }
                Ok(_) if key != 7 => {}
                other => panic!("write {key}: {other:?}"),
            }
        }
        let rows = stored(&db).await;
        assert_eq!(rows.len(), 19, "the 19 others are stored: {rows:?}");
        assert!(rows.iter().all(|(key, _)| *key != 7));
        let txids: std::collections::HashSet<i64> = answers.into_iter().filter_map(Result::ok).collect();
        assert!(txids.len() < 19, "the others still shared a transaction");
        writes.stop();
    }

    #[tokio::test]
    async fn writes_of_one_key_apply_in_arrival_order() {
        let (db, pool) = scratch().await;
        let writes = GroupCommit::start(pool, bounds(1, 100, 1000));
        // Keys interleaved, values rising in arrival order within each key;
        // the batch sorts by key but keeps arrival order within one.
        let submitted = (0..60i64).map(|n| {
            writes.submit(Append {
                key: [17, 5, 11][(n % 3) as usize],
                value: n,
            })
        });
        for answer in join_all(submitted).await {
            answer.expect("written");
        }
        let rows = stored(&db).await;
        assert_eq!(rows.len(), 60);
        for key in [5, 11, 17] {
            let values: Vec<i64> = rows.iter().filter(|(k, _)| *k == key).map(|(_, v)| *v).collect();
            assert!(values.windows(2).all(|w| w[0] < w[1]), "key {key}: {values:?}");
        }
        writes.stop();
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once_and_loses_nothing_it_took() {
        let (db, pool) = scratch().await;
        // Hold the table so the first batch waits, and the queue (4 rows)
        // fills behind it.
        let blocker = db.client().await;
        blocker
            .batch_execute("BEGIN; LOCK TABLE appended IN ACCESS EXCLUSIVE MODE")
            .await
            .unwrap();
        let writes = std::sync::Arc::new(GroupCommit::start(pool, bounds(1, 0, 4)));
        let taken: Vec<_> = (0..4u32)
            .map(|key| {
                let writes = writes.clone();
                tokio::spawn(async move { writes.submit(Append { key, value: 1 }).await })
            })
            .collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while writes.check_room().is_ok() {
            assert!(tokio::time::Instant::now() < deadline, "the queue never filled");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let refused = writes.submit(Append { key: 99, value: 1 }).await;
        assert!(matches!(refused, Err(WriteError::Full)), "{refused:?}");
        blocker.batch_execute("COMMIT").await.unwrap();
        for write in taken {
            write.await.unwrap().expect("a write taken is written");
        }
        let rows = stored(&db).await;
        assert_eq!(rows.len(), 4, "{rows:?}");
        writes.stop();
    }
}
