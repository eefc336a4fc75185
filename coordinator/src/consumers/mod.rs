//! What the coordinator does with the messages it consumes. Each handler is
//! run by `clarion_runtime::consumer::QueueConsumer`, a supervised actor per
//! queue that hands it one delivery at a time.

pub mod cleanup;
pub mod dead_letters;
pub mod reports;

use std::future::Future;
use std::time::Duration;

use clarion_runtime::backoff::Backoff;
use tracing::{error, info, warn};
use uuid::Uuid;

use crate::store::delivery::Completion;

/// How long a handler keeps retrying a database write before giving the
/// message back to the broker. Long enough to ride out a database restart.
const DATABASE_PATIENCE: Duration = Duration::from_secs(60);

/// Runs `op` until it succeeds or [`DATABASE_PATIENCE`] has passed.
pub(crate) async fn retry_database<T, E, F, Fut>(what: &str, mut op: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let deadline = tokio::time::Instant::now() + DATABASE_PATIENCE;
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        match op().await {
            Ok(value) => return Ok(value),
            Err(err) if tokio::time::Instant::now() < deadline => {
                let delay = backoff.next_delay();
                warn!(what, error = %err, retry_in_ms = delay.as_millis() as u64, "database write failed; retrying");
                tokio::time::sleep(delay).await;
            }
            Err(err) => return Err(err),
        }
    }
}

/// Says loudly what completing a notification decided.
pub(crate) fn log_completion(id: Uuid, completion: &Completion, invalid_threshold: f64) {
    let t = completion.timings;
    if completion.invalid_withheld {
        error!(
            notification.id = %id,
            invalid = completion.invalid,
            audience = completion.audience,
            threshold = invalid_threshold,
            "ALERT: too many tokens refused as invalid; suspecting Clarion's configuration \
             (bundle id, Firebase project, APNs environment) and deleting none of them"
        );
    }
    info!(
        notification.id = %id,
        audience = completion.audience,
        t50_ms = t.t50_ms,
        t90_ms = t.t90_ms,
        t99_ms = t.t99_ms,
        invalid = completion.invalid,
        invalid_deleted = completion.invalid_deleted,
        "notification complete"
    );
}
