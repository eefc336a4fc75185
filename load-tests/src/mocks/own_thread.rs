//! Running a mock on a single-threaded runtime of its own thread.
//!
//! On a multi-thread runtime a mock's connection tasks are stolen by other
//! workers and compete with the benchmark's own threads: cross-thread
//! wake-ups and lock contention on every request. Apple and Google do not run
//! on the benchmark's machine, so the mocks should cost it as little as
//! possible: one thread per mock, nothing shared but the counters.

use std::future::Future;
use std::ops::Deref;

use anyhow::{Context, Result};
use tokio::sync::oneshot;

/// A mock serving on its own thread; the thread ends when this is dropped.
pub struct OnOwnThread<T> {
    mock: T,
    /// Dropped after `mock` (whose listeners abort their tasks): ends the
    /// thread's runtime.
    _stop: oneshot::Sender<()>,
}

impl<T> Deref for OnOwnThread<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.mock
    }
}

/// Calls `start` on a new thread named `name` with a current-thread tokio
/// runtime, which then serves everything `start` spawned.
pub async fn start_on_own_thread<T, F, Fut>(name: &str, start: F) -> Result<OnOwnThread<T>>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T>>,
{
    let (started_tx, started_rx) = oneshot::channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(err) => {
                    let _ = started_tx.send(Err(anyhow::Error::new(err)));
                    return;
                }
            };
            runtime.block_on(async move {
                let _ = started_tx.send(start().await);
                let _ = stop_rx.await;
            });
        })
        .with_context(|| format!("starting the {name} thread"))?;
    let mock = started_rx
        .await
        .with_context(|| format!("the {name} thread ended early"))??;
    Ok(OnOwnThread { mock, _stop: stop_tx })
}
