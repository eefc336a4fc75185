//! Completing a notification once every job and batch is accounted for:
//! its timings, its status, and the safety valve on invalid tokens — then
//! saying loudly what was decided.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio_postgres::Transaction;
use tracing::{error, info};
use uuid::Uuid;

use super::timings::{NINETY_IN_TWO_MS, Timings, reachable, timings};
use crate::store::StoreError;
use crate::store::delivery::{delete_registrations, finished, mark_complete, take_held_invalid_tokens};

/// What completing a notification decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Completion {
    pub audience: u64,
    pub invalid: u64,
    /// Registrations deleted for invalid tokens (0 when withheld).
    pub invalid_deleted: u64,
    /// True when the invalid share was above the threshold: nothing was
    /// deleted and the notification is marked.
    pub invalid_withheld: bool,
    pub timings: Timings,
}

/// The safety valve: invalid tokens are deleted only while they are at
/// most `threshold` of the audience; above it Clarion suspects its own
/// configuration (bundle id, Firebase project, APNs environment).
pub fn withholds_invalid(audience: u64, invalid: u64, threshold: f64) -> bool {
    audience > 0 && invalid as f64 > threshold * audience as f64
}

/// Completes the notification if every job and every batch is accounted for
/// and it is not complete yet (inside the caller's transaction).
pub async fn complete_if_finished(
    tx: &Transaction<'_>,
    id: Uuid,
    invalid_threshold: f64,
) -> Result<Option<Completion>, StoreError> {
    let Some(done) = finished(tx, id).await? else {
        return Ok(None);
    };
    let timings = timings(tx, id, reachable(done.audience, done.unregistered)).await?;
    let withheld = withholds_invalid(done.audience, done.invalid, invalid_threshold);
    let held = take_held_invalid_tokens(tx, id).await?;
    let invalid_deleted = if withheld {
        0
    } else {
        delete_registrations(tx, id, &held, done.created_at).await?
    };
    let decision = if withheld { "keep" } else { "delete" };
    mark_complete(tx, id, decision, timings.as_array()).await?;
    Ok(Some(Completion {
        audience: done.audience,
        invalid: done.invalid,
        invalid_deleted,
        invalid_withheld: withheld,
        timings,
    }))
}

/// Notifications completed by this process, and how many of them met 90in2
/// (the `clarion_coordinator_ninety_in_two_ratio` gauge).
static COMPLETED: AtomicU64 = AtomicU64::new(0);
static MET_NINETY_IN_TWO: AtomicU64 = AtomicU64::new(0);

/// Says loudly what completing a notification decided, and counts it.
pub fn announce(id: Uuid, completion: &Completion, invalid_threshold: f64) {
    let t = completion.timings;
    count(completion);
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

fn count(completion: &Completion) {
    let t = completion.timings;
    for (quantile, ms) in [("t50", t.t50_ms), ("t90", t.t90_ms), ("t99", t.t99_ms)] {
        if let Some(ms) = ms {
            metrics::histogram!("clarion_coordinator_time_to_delivery_seconds", "quantile" => quantile)
                .record(f64::from(ms) / 1000.0);
        }
    }
    let completed = COMPLETED.fetch_add(1, Ordering::Relaxed) + 1;
    let met = if t.t90_ms.is_some_and(|ms| ms <= NINETY_IN_TWO_MS) {
        MET_NINETY_IN_TWO.fetch_add(1, Ordering::Relaxed) + 1
    } else {
        MET_NINETY_IN_TWO.load(Ordering::Relaxed)
    };
    metrics::counter!("clarion_coordinator_notifications_completed_total").increment(1);
    metrics::gauge!("clarion_coordinator_ninety_in_two_ratio").set(met as f64 / completed as f64);
    metrics::counter!("clarion_coordinator_registrations_deleted_total", "reason" => "invalid")
        .increment(completion.invalid_deleted);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_valve_withholds_only_above_the_threshold() {
        assert!(
            !withholds_invalid(1000, 50, 0.05),
            "exactly at the threshold: deleted"
        );
        assert!(withholds_invalid(1000, 51, 0.05));
        assert!(!withholds_invalid(0, 0, 0.05), "no audience, nothing to withhold");
    }
}
