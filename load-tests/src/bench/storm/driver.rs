//! Drives one load for one phase: a fixed number of connections (as wrk
//! holds 64), each taking the next request slot in turn, paced closed- or
//! open-loop, until the phase's count or time is up or the caller stops
//! it; every answer goes to the load's [`Recorder`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::connection::Connection;
use super::recorder::{LoadFigures, Outcome, Recorder};
use super::requests::Requests;
use super::schedule::Pace;

/// A pause after a failed connection, so a closed loop against a server
/// that refuses connections does not spin.
const AFTER_CONNECTION_FAILURE: Duration = Duration::from_millis(20);

/// How one load runs in one phase.
#[derive(Debug, Clone, Copy)]
pub struct Phase {
    pub pace: Pace,
    pub connections: usize,
    /// The phase ends this long after its start at the latest.
    pub length: Duration,
    /// Each request's deadline.
    pub request_deadline: Duration,
}

/// Runs `requests` against `addr` for `phase` (or until `stop` is set);
/// the timeline is placed on the clock that started at `origin`.
pub async fn drive(
    addr: &str,
    requests: Arc<Requests>,
    phase: Phase,
    origin: Instant,
    stop: Arc<AtomicBool>,
) -> Result<LoadFigures> {
    let started = Instant::now();
    let shared = Arc::new(Shared {
        requests,
        phase,
        started,
        deadline: started + phase.length,
        max_requests: phase.pace.max_requests(phase.length),
        next_slot: AtomicU64::new(0),
        stop,
        recorder: Mutex::new(Recorder::new(origin, started).context("creating the latency histograms")?),
    });
    let workers: Vec<_> = (0..phase.connections.max(1))
        .map(|_| tokio::spawn(work(Arc::clone(&shared), Connection::new(addr.to_owned()))))
        .collect();
    for worker in workers {
        worker.await.context("a load connection's task failed")??;
    }
    Ok(lock(&shared.recorder).figures())
}

/// What a load's connections share.
struct Shared {
    requests: Arc<Requests>,
    phase: Phase,
    started: Instant,
    deadline: Instant,
    max_requests: u64,
    next_slot: AtomicU64,
    stop: Arc<AtomicBool>,
    recorder: Mutex<Recorder>,
}

/// One connection's loop: bounded by the phase's request count and deadline.
async fn work(shared: Arc<Shared>, mut connection: Connection) -> Result<()> {
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let slot = shared.next_slot.fetch_add(1, Ordering::Relaxed);
        if slot >= shared.max_requests {
            return Ok(());
        }
        let due = match shared.phase.pace.due(slot) {
            None => Instant::now(),
            Some(offset) => match shared.started.checked_add(offset) {
                Some(due) if due < shared.deadline => due,
                _ => return Ok(()),
            },
        };
        tokio::time::sleep_until(due.into()).await;
        if Instant::now() >= shared.deadline {
            return Ok(());
        }
        let request = shared.requests.request(slot)?;
        let result = connection.send(request, shared.phase.request_deadline).await;
        let ended = Instant::now();
        let outcome = match result {
            Ok(answer) => {
                shared.requests.answered(slot, &answer);
                Outcome::Answered(answer.status)
            }
            Err(outcome) => outcome,
        };
        // From the time the request was due: an open loop that falls behind
        // counts the wait for a free connection too (no coordinated omission).
        let latency = ended.saturating_duration_since(due);
        lock(&shared.recorder).record(ended, latency, outcome, shared.requests.items());
        if outcome == Outcome::ConnectionFailed {
            tokio::time::sleep(AFTER_CONNECTION_FAILURE).await;
        }
    }
}

/// The recorder, even if another connection's task panicked holding it.
fn lock(recorder: &Mutex<Recorder>) -> MutexGuard<'_, Recorder> {
    recorder.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
