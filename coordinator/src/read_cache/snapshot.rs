//! Snapshots of a computed read (a notification's status, its curve): each
//! computed at most once per refresh interval per coordinator however many
//! ask, concurrent askers sharing the one computation in flight (single
//! flight, `moka`'s `try_get_with`), the answer's bytes and ETag kept with it.
//!
//! Bounded twice: an entry expires `refresh` after it was computed (so a
//! change shows within one interval), and the entries together weigh at
//! most a byte budget (the least recently used go first). A failed
//! computation (an unknown id: 404) is shared by those who waited for it
//! and never stored, so asking for ids that do not exist grows nothing.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use actix_web::web::Bytes;
use moka::future::Cache;
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::metrics;

/// Bytes the snapshots of one view (status or curve) may weigh together. A
/// status answer is about 2 KiB (up to 64 KiB with 50 localizations), so
/// this holds some 8,000 typical notifications' snapshots, far more than a
/// newsroom polls at once; past it the least recently used go.
pub const SNAPSHOT_BUDGET_BYTES: u64 = 32 * 1024 * 1024;

/// Longest a request waits for a snapshot being computed, its own or one in
/// flight: a computation is a few indexed queries (milliseconds); past this
/// the database is stuck and the request is answered 503.
pub const SNAPSHOT_DEADLINE: Duration = Duration::from_secs(10);

/// A computed value with the JSON answer made of it and that answer's
/// strong ETag (the first 12 bytes of its SHA-256, in hex).
#[derive(Debug)]
pub struct Snapshot<T> {
    pub value: T,
    pub body: Bytes,
    pub etag: String,
}

impl<T: Serialize> Snapshot<T> {
    /// `value` with its JSON bytes and their ETag.
    pub fn of(value: T) -> Result<Self, serde_json::Error> {
        let body = Bytes::from(serde_json::to_vec(&value)?);
        let etag = hex::encode(&Sha256::digest(&body)[..12]);
        Ok(Self { value, body, etag })
    }
}

/// Why a snapshot could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError<E> {
    /// The computation failed (every asker that waited for it gets this).
    #[error("{0}")]
    Failed(Arc<E>),
    /// The computation took longer than the askers may wait.
    #[error("computing the {view} took longer than {deadline:?}")]
    TimedOut { view: &'static str, deadline: Duration },
}

/// The snapshots of one view (`status`, `curve`) by notification id.
pub struct SnapshotCache<T> {
    entries: Cache<Uuid, Arc<Snapshot<T>>>,
    /// The metric label of the view.
    view: &'static str,
    /// Longest an asker waits for a computation (its own or one in flight).
    deadline: Duration,
}

/// What an entry weighs against the budget: its answer's bytes, twice (the
/// value it was made of is about as large), and a little for the rest.
fn weight<T>(snapshot: &Snapshot<T>) -> u32 {
    let bytes = snapshot.body.len().saturating_mul(2).saturating_add(256);
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

impl<T: Send + Sync + 'static> SnapshotCache<T> {
    /// The snapshots of `view`, each answered for `refresh` after it was
    /// computed, within [`SNAPSHOT_BUDGET_BYTES`] and [`SNAPSHOT_DEADLINE`].
    pub fn new(view: &'static str, refresh: Duration) -> Self {
        Self::bounded(view, refresh, SNAPSHOT_BUDGET_BYTES, SNAPSHOT_DEADLINE)
    }

    /// A cache whose entries live `refresh` and weigh at most
    /// `budget_bytes` together; askers wait at most `deadline`.
    pub fn bounded(view: &'static str, refresh: Duration, budget_bytes: u64, deadline: Duration) -> Self {
        let entries = Cache::builder()
            .name(view)
            .time_to_live(refresh)
            .max_capacity(budget_bytes)
            .weigher(|_id: &Uuid, snapshot: &Arc<Snapshot<T>>| weight(snapshot))
            .build();
        Self {
            entries,
            view,
            deadline,
        }
    }

    /// The snapshot of `id`: the stored one while it is fresh, else the
    /// one `compute` makes — or, when another asker is computing it
    /// already, the one that asker makes. Counted in
    /// `clarion_coordinator_status_computations_total` when computed.
    pub async fn get<E, F>(&self, id: Uuid, compute: F) -> Result<Arc<Snapshot<T>>, SnapshotError<E>>
    where
        E: Send + Sync + 'static,
        F: Future<Output = Result<Snapshot<T>, E>>,
    {
        let view = self.view;
        let computed = async move {
            metrics::STATUS_COMPUTATIONS.with([view]).increment(1);
            compute.await.map(Arc::new)
        };
        match tokio::time::timeout(self.deadline, self.entries.try_get_with(id, computed)).await {
            Ok(Ok(snapshot)) => Ok(snapshot),
            Ok(Err(err)) => Err(SnapshotError::Failed(err)),
            Err(_) => Err(SnapshotError::TimedOut {
                view,
                deadline: self.deadline,
            }),
        }
    }

    /// Drops the snapshot of `id` (this coordinator just changed it): the
    /// next asker computes it afresh. A computation in flight may still
    /// store what it read before the change; that one lives one interval.
    pub async fn forget(&self, id: Uuid) {
        self.entries.invalidate(&id).await;
    }

    /// What the entries weigh now, after pending evictions (tests).
    pub async fn weighed(&self) -> (u64, u64) {
        self.entries.run_pending_tasks().await;
        (self.entries.entry_count(), self.entries.weighted_size())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn cache(refresh: Duration, budget: u64) -> SnapshotCache<String> {
        SnapshotCache::bounded("test", refresh, budget, Duration::from_secs(10))
    }

    #[tokio::test]
    async fn concurrent_askers_share_one_computation() {
        let cache = Arc::new(cache(Duration::from_secs(60), 1 << 20));
        let computed = Arc::new(AtomicU32::new(0));
        let id = Uuid::now_v7();
        let askers = (0..100).map(|_| {
            let (cache, computed) = (cache.clone(), computed.clone());
            tokio::spawn(async move {
                cache
                    .get(id, async {
                        computed.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Snapshot::of("status".to_owned()).map_err(|err| err.to_string())
                    })
                    .await
                    .map(|snapshot| snapshot.etag.clone())
            })
        });
        let etags: Vec<_> = futures::future::join_all(askers).await;
        assert_eq!(computed.load(Ordering::SeqCst), 1);
        let first = etags[0]
            .as_ref()
            .expect("joined")
            .as_ref()
            .expect("computed")
            .clone();
        assert!(
            etags
                .iter()
                .all(|etag| etag.as_ref().ok().and_then(|e| e.as_ref().ok()) == Some(&first))
        );
    }

    #[tokio::test]
    async fn a_failure_is_not_stored_and_an_entry_expires() {
        let cache = cache(Duration::from_millis(100), 1 << 20);
        let id = Uuid::now_v7();
        let failed = cache
            .get(id, async { Err::<Snapshot<String>, _>("not found") })
            .await;
        assert!(matches!(failed, Err(SnapshotError::Failed(_))));
        assert_eq!(cache.weighed().await.0, 0, "a failure takes no entry");
        let first = cache.get(id, async { Snapshot::of("one".to_owned()) }).await;
        assert_eq!(first.expect("computed").value, "one");
        let kept = cache.get(id, async { Snapshot::of("two".to_owned()) }).await;
        assert_eq!(kept.expect("stored").value, "one", "fresh: not computed again");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let now = cache.get(id, async { Snapshot::of("two".to_owned()) }).await;
            if now.expect("computed").value == "two" {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the entry never expired");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn the_entries_stay_within_the_byte_budget() {
        let budget = 64 * 1024;
        let cache = cache(Duration::from_secs(60), budget);
        for _ in 0..2_000 {
            let snapshot = cache
                .get(Uuid::now_v7(), async { Snapshot::of("x".repeat(500)) })
                .await;
            assert!(snapshot.is_ok());
        }
        let (entries, weighed) = cache.weighed().await;
        assert!(weighed <= budget, "{weighed} bytes in {entries} entries");
        assert!(entries < 2_000 && entries > 0, "{entries}");
    }

    #[tokio::test]
    async fn a_computation_past_the_deadline_is_a_time_out() {
        let cache = SnapshotCache::<String>::bounded(
            "test",
            Duration::from_secs(1),
            1 << 20,
            Duration::from_millis(50),
        );
        let slow = cache
            .get(Uuid::now_v7(), async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Snapshot::of("late".to_owned())
            })
            .await;
        assert!(matches!(slow, Err(SnapshotError::TimedOut { .. })));
    }
}
