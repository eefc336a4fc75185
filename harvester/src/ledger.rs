//! The published-batch ledger: which of a job's token batches the broker has
//! confirmed, so a job harvested again — redelivered after a crash, or
//! published twice by the coordinator's relay — publishes only what the
//! earlier attempt had not.
//!
//! Each confirmed batch is written as `(notification, job, seq, digest)` to
//! `published_batches`, where the digest is a hash of the batch's tokens.
//! Every job reads its ledger first (one indexed query), re-cuts the same
//! stream and skips a batch only when both
//! its seq and its digest match a recorded one: if registrations changed in
//! between, the batches shift and are published again (a few duplicates,
//! never a device missed).
//!
//! Writes never hold up the harvest: a writer task takes the confirmed
//! batches from a bounded channel and inserts whatever has queued up in one
//! statement, on its own pooled connection (the harvest's connection is
//! busy streaming). A write that fails is logged and dropped: the ledger
//! only saves duplicates, it never decides delivery. What a crash can still
//! duplicate is the batches published but not yet confirmed (the publish
//! window) plus those confirmed since the writer's last insert.

use std::collections::HashMap;

use clarion_proto::TokenBatch;
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::warn;
use uuid::Uuid;

/// Confirmed batches waiting for the writer: a few inserts' worth; when the
/// database lags this far behind, the harvest waits for it.
const PENDING: usize = 1024;

/// A batch as the ledger knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub seq: u32,
    pub digest: i64,
}

impl Entry {
    pub fn of(batch: &TokenBatch) -> Self {
        Self {
            seq: batch.batch_id.seq,
            digest: batch.tokens_digest() as i64,
        }
    }
}

/// The batches of one job that an earlier attempt had confirmed.
pub async fn published(
    pool: &PgPool,
    notification_id: Uuid,
    job_index: u32,
) -> Result<HashMap<u32, i64>, DbError> {
    let conn = pool.get().await?;
    let rows = conn
        .query(
            "SELECT seq, digest FROM published_batches WHERE notification_id = $1 AND job_index = $2",
            &[&notification_id, &(job_index as i32)],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| (row.get::<_, i32>(0).max(0) as u32, row.get::<_, i64>(1)))
        .collect())
}

/// Records one job's confirmed batches as they come.
pub struct Ledger {
    sender: mpsc::Sender<Entry>,
    writer: JoinHandle<()>,
}

impl Ledger {
    pub fn open(pool: PgPool, notification_id: Uuid, job_index: u32) -> Self {
        let (sender, receiver) = mpsc::channel(PENDING);
        let writer = tokio::spawn(write(pool, notification_id, job_index, receiver));
        Self { sender, writer }
    }

    /// Records a confirmed batch (waits only when the writer is far behind).
    pub async fn record(&self, entry: Entry) {
        // Err only if the writer is gone, which it is not while `self` lives.
        let _ = self.sender.send(entry).await;
    }

    /// Waits until everything recorded is written (or given up).
    pub async fn close(self) {
        drop(self.sender);
        let _ = self.writer.await;
    }
}

async fn write(pool: PgPool, notification_id: Uuid, job_index: u32, mut receiver: mpsc::Receiver<Entry>) {
    let mut entries = Vec::new();
    while receiver.recv_many(&mut entries, PENDING).await > 0 {
        if let Err(err) = insert(&pool, notification_id, job_index, &entries).await {
            warn!(
                notification.id = %notification_id,
                job = job_index,
                batches = entries.len(),
                error = %err,
                "published batches not recorded; a redelivery of this job would publish them again"
            );
        }
        entries.clear();
    }
}

async fn insert(
    pool: &PgPool,
    notification_id: Uuid,
    job_index: u32,
    entries: &[Entry],
) -> Result<(), DbError> {
    let conn = pool.get().await?;
    let seqs: Vec<i32> = entries.iter().map(|e| e.seq as i32).collect();
    let digests: Vec<i64> = entries.iter().map(|e| e.digest).collect();
    conn.execute(
        "INSERT INTO published_batches (notification_id, job_index, seq, digest)
         SELECT $1, $2, seq, digest FROM unnest($3::integer[], $4::bigint[]) AS b (seq, digest)
         ON CONFLICT (notification_id, job_index, seq) DO UPDATE SET digest = EXCLUDED.digest",
        &[&notification_id, &(job_index as i32), &seqs, &digests],
    )
    .await?;
    Ok(())
}
