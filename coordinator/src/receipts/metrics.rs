//! The receipts' metrics: names, help and labels in one place.

use super::body::Event;
use super::record::Outcome;

/// Receipts by event and outcome (`accepted`, `duplicate`, `ignored`).
pub const RECEIPTS_TOTAL: &str = "clarion_receipts_total";
/// Seconds from the send to the (clamped) receipt time of each counted
/// receipt, by event.
pub const RECEIPT_DELAY_SECONDS: &str = "clarion_receipts_delay_seconds";
/// Receipt requests turned away with 503 because the receipt writes in
/// flight were at their bound.
pub const RECEIPTS_SHED_TOTAL: &str = "clarion_receipts_shed_requests_total";

const OUTCOMES: [&str; 3] = ["accepted", "duplicate", "ignored"];

/// Every series exists from the start, at zero.
pub fn declare() {
    metrics::describe_counter!(RECEIPTS_TOTAL, "Device receipts by event and outcome");
    metrics::describe_histogram!(
        RECEIPT_DELAY_SECONDS,
        metrics::Unit::Seconds,
        "Seconds from the send to each counted device receipt"
    );
    metrics::describe_counter!(
        RECEIPTS_SHED_TOTAL,
        "Receipt requests answered 503: writes in flight at their bound"
    );
    for event in Event::ALL {
        for outcome in OUTCOMES {
            metrics::counter!(RECEIPTS_TOTAL, "event" => event.as_str(), "outcome" => outcome).increment(0);
        }
    }
    metrics::counter!(RECEIPTS_SHED_TOTAL).increment(0);
}

/// Counts one request's outcome (once per request, not per receipt).
pub fn record(outcome: &Outcome) {
    for (event, counts) in Event::ALL.iter().zip(outcome.by_event) {
        for (label, count) in OUTCOMES.iter().zip(counts) {
            if count > 0 {
                metrics::counter!(RECEIPTS_TOTAL, "event" => event.as_str(), "outcome" => *label)
                    .increment(count);
            }
        }
    }
    for (event, seconds) in &outcome.delays {
        metrics::histogram!(RECEIPT_DELAY_SECONDS, "event" => event.as_str()).record(*seconds);
    }
}

pub fn shed() {
    metrics::counter!(RECEIPTS_SHED_TOTAL).increment(1);
}
