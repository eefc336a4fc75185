//! `GET /api/v1/registrations/{token}` from memory, never staler than the
//! read: a registration read after a write acknowledged by any coordinator
//! sees that write.
//!
//! How (the listener is [`super::listener`]):
//! - Entries are filled only by reads, each from a database read, and
//!   dropped when PostgreSQL says their device changed: a trigger on
//!   `registrations` sends `NOTIFY clarion_registrations` in the writing
//!   transaction, delivered to every coordinator's listener at commit.
//! - A read fills its entry only if no notice for the device (and no
//!   clearing) came between its placeholder and its answer, so a database
//!   answer older than a notice is never kept.
//! - Before a cached answer is served, the listener proves it is caught up:
//!   it sends a marker `NOTIFY` on a channel of its own after the request
//!   arrived and waits for it to come back. Notices arrive in commit order,
//!   so every write acknowledged before the request has been applied by
//!   then. One marker answers every request that arrived before it was sent
//!   (a few per millisecond at most, not one per read).
//! - While the listener is not listening (at start, after its connection
//!   was lost), the cache is empty and every read goes to the database; it
//!   is cleared again when listening resumes. A marker that does not come
//!   back within [`CATCH_UP_DEADLINE`] sends that read to the database.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use actix_web::web::Bytes;
use moka::future::Cache;
use moka::ops::compute::Op;
use tokio::sync::{Notify, watch};

use crate::metrics;

/// Longest a read waits for the listener to prove it is caught up before
/// it asks the database instead.
pub const CATCH_UP_DEADLINE: Duration = Duration::from_secs(2);

/// An entry unused this long goes (memory back for devices that stopped
/// asking).
const IDLE_TIME: Duration = Duration::from_secs(600);

/// A device: (app, token).
pub type DeviceKey = (String, String);

#[derive(Clone)]
enum Slot {
    /// A read of the database is under way; `ticket` names it.
    Reading { ticket: u64, epoch: u64 },
    /// The registration as answered (JSON), read during `epoch`.
    Ready { epoch: u64, body: Bytes },
}

/// The registration reads of this coordinator (cheap to clone).
#[derive(Clone)]
pub struct RegistrationReads {
    inner: Arc<Inner>,
}

struct Inner {
    entries: Option<Cache<DeviceKey, Slot>>,
    /// Bumped whenever everything is dropped: entries and reads of an
    /// older epoch are never served nor kept.
    epoch: AtomicU64,
    /// True only while the listener is listening.
    listening: AtomicBool,
    tickets: AtomicU64,
    /// The last marker the listener sent (set before it is sent).
    markers_sent: AtomicU64,
    /// The highest marker a read is waiting for.
    markers_wanted: AtomicU64,
    /// The last marker that came back.
    markers_back: watch::Sender<u64>,
    /// Wakes the listener when a read wants a marker.
    kick: Notify,
}

/// What an entry weighs against the budget, in bytes.
fn weight(key: &DeviceKey, slot: &Slot) -> u32 {
    let body = match slot {
        Slot::Reading { .. } => 0,
        Slot::Ready { body, .. } => body.len(),
    };
    u32::try_from(key.0.len() + key.1.len() + body + 128).unwrap_or(u32::MAX)
}

impl RegistrationReads {
    /// A cache of at most `budget_bytes` (0: no cache, every read goes to
    /// the database).
    pub fn new(budget_bytes: u64) -> Self {
        let entries = (budget_bytes > 0).then(|| {
            Cache::builder()
                .name("registrations")
                .max_capacity(budget_bytes)
                .weigher(weight)
                .time_to_idle(IDLE_TIME)
                .build()
        });
        Self {
            inner: Arc::new(Inner {
                entries,
                epoch: AtomicU64::new(0),
                listening: AtomicBool::new(false),
                tickets: AtomicU64::new(0),
                markers_sent: AtomicU64::new(0),
                markers_wanted: AtomicU64::new(0),
                markers_back: watch::Sender::new(0),
                kick: Notify::new(),
            }),
        }
    }

    /// Whether there is a cache at all (a listener is worth running).
    pub fn enabled(&self) -> bool {
        self.inner.entries.is_some()
    }

    /// The answer for `key`: from memory when that is proven current, else
    /// `load` (the database's answer, `None` for an unknown device: never
    /// kept).
    pub async fn read<E, F>(&self, key: DeviceKey, load: F) -> Result<Option<Bytes>, E>
    where
        F: Future<Output = Result<Option<Bytes>, E>>,
    {
        let inner = &self.inner;
        let Some(entries) = inner
            .entries
            .as_ref()
            .filter(|_| inner.listening.load(Ordering::SeqCst))
        else {
            metrics::REGISTRATION_READS.with(["bypass"]).increment(1);
            return load.await;
        };
        if matches!(entries.get(&key).await, Some(Slot::Ready { .. })) {
            if !self.caught_up().await {
                metrics::REGISTRATION_READS.with(["bypass"]).increment(1);
                return load.await;
            }
            // Looked at again: catching up may have dropped it.
            if let Some(Slot::Ready { epoch, body }) = entries.get(&key).await
                && epoch == inner.epoch.load(Ordering::SeqCst)
                && inner.listening.load(Ordering::SeqCst)
            {
                metrics::REGISTRATION_READS.with(["hit"]).increment(1);
                return Ok(Some(body));
            }
        }
        metrics::REGISTRATION_READS.with(["miss"]).increment(1);
        let ticket = inner.tickets.fetch_add(1, Ordering::SeqCst) + 1;
        let epoch = inner.epoch.load(Ordering::SeqCst);
        let placed = entries
            .entry(key.clone())
            .or_insert_with(async { Slot::Reading { ticket, epoch } })
            .await;
        let mine = matches!(placed.value(), Slot::Reading { ticket: t, .. } if *t == ticket);
        let loaded = load.await;
        if mine {
            let keep = match &loaded {
                Ok(Some(body)) => Some(body.clone()),
                _ => None,
            };
            let inner = inner.clone();
            entries
                .entry(key)
                .and_compute_with(|current| async move {
                    let still_mine = matches!(
                        current.as_ref().map(|entry| entry.value()),
                        Some(Slot::Reading { ticket: t, epoch: e }) if *t == ticket && *e == epoch
                    );
                    let current_epoch =
                        epoch == inner.epoch.load(Ordering::SeqCst) && inner.listening.load(Ordering::SeqCst);
                    match (still_mine, keep) {
                        (false, _) => Op::Nop,
                        (true, Some(body)) if current_epoch => Op::Put(Slot::Ready { epoch, body }),
                        (true, _) => Op::Remove,
                    }
                })
                .await;
        }
        loaded
    }

    /// Waits until a marker sent after this call came back (the listener
    /// has applied every notice of a write acknowledged before); false
    /// after [`CATCH_UP_DEADLINE`] or when the listener stops listening.
    async fn caught_up(&self) -> bool {
        let inner = &self.inner;
        let target = inner.markers_sent.load(Ordering::SeqCst) + 1;
        inner.markers_wanted.fetch_max(target, Ordering::SeqCst);
        inner.kick.notify_one();
        let mut back = inner.markers_back.subscribe();
        let waited = tokio::time::timeout(CATCH_UP_DEADLINE, back.wait_for(|back| *back >= target)).await;
        matches!(waited, Ok(Ok(_))) && inner.listening.load(Ordering::SeqCst)
    }

    // The listener's side.

    /// Drops the entries of these devices (they changed).
    pub(super) async fn forget(&self, keys: Vec<DeviceKey>) {
        if let Some(entries) = &self.inner.entries {
            for key in keys {
                entries.invalidate(&key).await;
            }
        }
    }

    /// Drops everything, and every read under way keeps nothing.
    pub(super) fn forget_all(&self) {
        self.inner.epoch.fetch_add(1, Ordering::SeqCst);
        if let Some(entries) = &self.inner.entries {
            entries.invalidate_all();
        }
    }

    /// Listening (every later change will be told) or not (reads go to the
    /// database); either way everything kept so far is dropped.
    pub(super) fn set_listening(&self, listening: bool) {
        self.forget_all();
        self.inner.listening.store(listening, Ordering::SeqCst);
        self.forget_all();
        metrics::REGISTRATION_CACHE_LISTENING
            .get()
            .set(if listening { 1.0 } else { 0.0 });
    }

    /// The next marker to send when a read waits for one not sent yet
    /// (numbers it as sent: send it right after).
    pub(super) fn next_marker(&self) -> Option<u64> {
        let inner = &self.inner;
        let sent = inner.markers_sent.load(Ordering::SeqCst);
        let back = *inner.markers_back.borrow();
        (inner.markers_wanted.load(Ordering::SeqCst) > sent && back >= sent).then(|| {
            inner.markers_sent.store(sent + 1, Ordering::SeqCst);
            sent + 1
        })
    }

    /// Marker `number` came back.
    pub(super) fn marker_back(&self, number: u64) {
        self.inner.markers_back.send_if_modified(|back| {
            let newer = number > *back;
            if newer {
                *back = number;
            }
            newer
        });
    }

    /// Marks every marker sent or wanted as back (the connection they went
    /// on is gone): the reads waiting for them wake, see the cache is not
    /// listening, and ask the database.
    pub(super) fn markers_lost(&self) {
        let inner = &self.inner;
        let wanted = inner.markers_wanted.load(Ordering::SeqCst);
        let sent = inner.markers_sent.fetch_max(wanted, Ordering::SeqCst).max(wanted);
        self.marker_back(sent);
    }

    /// Resolves when a read wants a marker.
    pub(super) async fn wanted(&self) {
        self.inner.kick.notified().await;
    }

    /// What is held now, after pending evictions: (entries, bytes).
    pub async fn weighed(&self) -> (u64, u64) {
        match &self.inner.entries {
            Some(entries) => {
                entries.run_pending_tasks().await;
                (entries.entry_count(), entries.weighted_size())
            }
            None => (0, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> DeviceKey {
        ("default".into(), format!("token-{n}"))
    }

    async fn load(body: &str) -> Result<Option<Bytes>, ()> {
        Ok(Some(Bytes::from(body.to_owned())))
    }

    #[tokio::test]
    async fn nothing_is_kept_or_served_while_not_listening() {
        let reads = RegistrationReads::new(1 << 20);
        assert_eq!(reads.read(key(1), load("a")).await, Ok(Some(Bytes::from("a"))));
        assert_eq!(reads.read(key(1), load("b")).await, Ok(Some(Bytes::from("b"))));
        assert_eq!(reads.weighed().await.0, 0);
    }

    #[tokio::test]
    async fn a_notice_during_a_read_keeps_its_answer_out() {
        let reads = RegistrationReads::new(1 << 20);
        reads.set_listening(true);
        let during = async {
            reads.forget(vec![key(1)]).await;
            Ok::<_, ()>(Some(Bytes::from("old")))
        };
        assert_eq!(reads.read(key(1), during).await, Ok(Some(Bytes::from("old"))));
        assert_eq!(
            reads.weighed().await.0,
            0,
            "the answer read before the notice is not kept"
        );
        // A read with no notice during it is kept (served once caught up).
        reads.read(key(1), load("new")).await.unwrap();
        assert_eq!(reads.weighed().await.0, 1);
    }

    #[tokio::test]
    async fn a_kept_answer_is_served_only_once_a_marker_came_back() {
        let reads = RegistrationReads::new(1 << 20);
        reads.set_listening(true);
        reads.read(key(1), load("kept")).await.unwrap();
        let listener = {
            let reads = reads.clone();
            tokio::spawn(async move {
                reads.wanted().await;
                let marker = reads.next_marker().expect("a marker wanted");
                reads.marker_back(marker);
            })
        };
        let served = reads.read(key(1), load("database")).await;
        assert_eq!(served, Ok(Some(Bytes::from("kept"))));
        listener.await.unwrap();
        // Listening lost: dropped, and the database answers.
        reads.set_listening(false);
        assert_eq!(
            reads.read(key(1), load("database")).await,
            Ok(Some(Bytes::from("database")))
        );
        assert_eq!(reads.weighed().await.0, 0);
    }

    #[tokio::test]
    async fn unknown_devices_are_never_kept_and_the_budget_holds() {
        let reads = RegistrationReads::new(32 * 1024);
        reads.set_listening(true);
        for n in 0..1_000 {
            let unknown = async { Ok::<_, ()>(None) };
            assert_eq!(reads.read(key(n), unknown).await, Ok(None));
        }
        assert_eq!(reads.weighed().await.0, 0);
        for n in 0..1_000 {
            reads.read(key(n), load(&"x".repeat(300))).await.unwrap();
        }
        let (entries, bytes) = reads.weighed().await;
        assert!(
            bytes <= 32 * 1024 && entries > 0,
            "{entries} entries, {bytes} bytes"
        );
    }
}
