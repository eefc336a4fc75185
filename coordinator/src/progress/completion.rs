//! Completing a notification once every job and batch is accounted for:
//! its timings, its status, and the safety valve on the tokens the
//! providers called gone or invalid — then saying loudly what was decided.
//!
//! The valve works per segment (`clarion_proto::platform::segments`: a
//! platform and APNs environment): the shares of a segment's attempted pushes answered gone
//! and invalid are compared with the thresholds, so a small segment that
//! is wholly misconfigured (a wrong bundle id for 40 devices of one
//! platform beside 960 of another) is caught, and a provider answering "gone" to everything
//! wipes no audience. A tripped segment's held tokens are all kept (and
//! stay held until an admin releases or discards them, `crate::api::held`),
//! the notification names it as suspect, and never counts as meeting 90in2.

use std::sync::atomic::{AtomicU64, Ordering};

use clarion_proto::platform::segment_named;
use tokio_postgres::Transaction;
use tracing::{error, info};
use uuid::Uuid;

use super::timings::{NINETY_IN_TWO_MS, Timings, reachable, timings};
use crate::metrics;
use crate::store::StoreError;
use crate::store::delivery::{
    SegmentCounts, delete_registrations, finished, mark_complete, segment_counts, take_held_tokens,
};

/// The safety valve's thresholds: the largest share of a segment's
/// attempted pushes answered gone, or invalid, whose registrations are
/// still deleted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Valve {
    pub gone: f64,
    pub invalid: f64,
}

impl Valve {
    /// Whether the segment's answers point at Clarion's configuration
    /// rather than at its devices.
    /// A segment a dispatcher's breaker held back is suspect whatever its
    /// shares (only its first pushes were made, all of them bad).
    pub fn trips(&self, counts: &SegmentCounts) -> bool {
        let attempted = counts.attempted as f64;
        counts.held_back > 0
            || (counts.attempted > 0
                && (counts.gone as f64 > self.gone * attempted
                    || counts.invalid as f64 > self.invalid * attempted))
    }
}

/// What completing a notification decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub audience: u64,
    pub invalid: u64,
    pub gone: u64,
    /// Registrations deleted now: the held tokens of the segments under
    /// the thresholds.
    pub deleted: u64,
    /// Segments over a threshold: none of their tokens was deleted.
    pub suspect_segments: Vec<String>,
    pub timings: Timings,
}

/// Completes a cancelled notification whose every job was dropped before
/// it was published: nothing was harvested, nothing is held.
pub async fn complete_unpublished(tx: &Transaction<'_>, id: Uuid) -> Result<(), StoreError> {
    mark_complete(tx, id, &[], [None; 3]).await
}

/// Completes the notification if every job and every batch is accounted for
/// and it is not complete yet (inside the caller's transaction).
pub async fn complete_if_finished(
    tx: &Transaction<'_>,
    id: Uuid,
    valve: Valve,
) -> Result<Option<Completion>, StoreError> {
    let Some(done) = finished(tx, id).await? else {
        return Ok(None);
    };
    let timings = timings(tx, id, reachable(done.audience, done.unregistered)).await?;
    let suspect_segments: Vec<String> = segment_counts(tx, id)
        .await?
        .into_iter()
        .filter(|counts| valve.trips(counts))
        .map(|counts| counts.segment)
        .collect();
    let held = take_held_tokens(tx, id, &suspect_segments).await?;
    let deleted = delete_registrations(tx, id, &held, done.sent_at).await?;
    mark_complete(tx, id, &suspect_segments, timings.as_array()).await?;
    Ok(Some(Completion {
        audience: done.audience,
        invalid: done.invalid,
        gone: done.unregistered,
        deleted,
        suspect_segments,
        timings,
    }))
}

/// Notifications completed by this process, and how many of them met 90in2
/// (the `clarion_coordinator_ninety_in_two_ratio` gauge).
static COMPLETED: AtomicU64 = AtomicU64::new(0);
static MET_NINETY_IN_TWO: AtomicU64 = AtomicU64::new(0);

/// Says loudly what completing a notification decided, and counts it.
pub fn announce(id: Uuid, completion: &Completion, valve: Valve) {
    let t = completion.timings;
    count(completion);
    for segment in &completion.suspect_segments {
        metrics::VALVE_TRIPPED.with([segment_label(segment)]).increment(1);
        error!(
            notification.id = %id,
            segment = %segment,
            gone_threshold = valve.gone,
            invalid_threshold = valve.invalid,
            "ALERT: too many of this segment's pushes answered gone or invalid; suspecting Clarion's \
             configuration (endpoint, bundle id, Firebase project, APNs environment) and deleting none \
             of its registrations"
        );
    }
    info!(
        notification.id = %id,
        audience = completion.audience,
        t50_ms = t.t50_ms,
        t90_ms = t.t90_ms,
        t99_ms = t.t99_ms,
        gone = completion.gone,
        invalid = completion.invalid,
        registrations_deleted = completion.deleted,
        suspect_segments = ?completion.suspect_segments,
        "notification complete"
    );
}

/// A segment as a metric label, from a fixed set.
fn segment_label(segment: &str) -> &'static str {
    segment_named(segment).unwrap_or("other")
}

fn count(completion: &Completion) {
    let t = completion.timings;
    for (quantile, ms) in [("t50", t.t50_ms), ("t90", t.t90_ms), ("t99", t.t99_ms)] {
        if let Some(ms) = ms {
            metrics::TIME_TO_DELIVERY
                .with([quantile])
                .record(f64::from(ms) / 1000.0);
        }
    }
    let completed = COMPLETED.fetch_add(1, Ordering::Relaxed) + 1;
    let met = if completion.suspect_segments.is_empty() && t.t90_ms.is_some_and(|ms| ms <= NINETY_IN_TWO_MS) {
        MET_NINETY_IN_TWO.fetch_add(1, Ordering::Relaxed) + 1
    } else {
        MET_NINETY_IN_TWO.load(Ordering::Relaxed)
    };
    metrics::NOTIFICATIONS_COMPLETED.get().increment(1);
    metrics::NINETY_IN_TWO.get().set(met as f64 / completed as f64);
    metrics::REGISTRATIONS_DELETED.get().increment(completion.deleted);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(attempted: u64, gone: u64, invalid: u64) -> SegmentCounts {
        SegmentCounts {
            segment: "ios/production".into(),
            attempted,
            gone,
            invalid,
            held_back: 0,
        }
    }

    #[test]
    fn the_valve_trips_only_above_a_threshold_of_the_segment() {
        let valve = Valve {
            gone: 0.2,
            invalid: 0.05,
        };
        assert!(!valve.trips(&counts(1000, 200, 50)), "exactly at the thresholds");
        assert!(valve.trips(&counts(1000, 201, 0)), "gone over 20%");
        assert!(valve.trips(&counts(1000, 0, 51)), "invalid over 5%");
        assert!(valve.trips(&counts(40, 0, 40)), "a small segment wholly refused");
        assert!(
            !valve.trips(&counts(0, 0, 0)),
            "nothing attempted, nothing to judge"
        );
        let held = SegmentCounts {
            held_back: 800,
            ..counts(200, 200, 0)
        };
        assert!(valve.trips(&held), "held back by a breaker: suspect");
    }
}
