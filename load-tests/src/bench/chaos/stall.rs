//! The time to recover from a fault, as the providers saw it: from the
//! fault until the notification's final status, the longest time between
//! two pushes the mocks accepted (read every `POLL`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::mocks::control::MockState;

const POLL: Duration = Duration::from_millis(20);

pub(super) struct StallWatch {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Duration>,
}

impl StallWatch {
    /// Starts watching what `mocks` accept.
    pub fn start(mocks: [Arc<MockState>; 2]) -> Self {
        let (stop, mut stopped) = oneshot::channel();
        let accepted = move || -> u64 { mocks.iter().map(|m| m.accounting.counters().accepted).sum() };
        let task = tokio::spawn(async move {
            let mut longest = Duration::ZERO;
            let mut last = (accepted(), Instant::now());
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    () = tokio::time::sleep(POLL) => {}
                }
                let now = accepted();
                if now != last.0 {
                    longest = longest.max(last.1.elapsed());
                    last = (now, Instant::now());
                }
            }
            longest
        });
        Self { stop, task }
    }

    /// The longest gap between two accepted pushes so far.
    pub async fn finish(self) -> Option<Duration> {
        let _ = self.stop.send(());
        self.task.await.ok()
    }
}
