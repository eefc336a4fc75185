//! What the receipts path tells the metrics (declared in
//! [`crate::metrics`]): once per request, not per receipt.

use super::body::Event;
use super::record::Outcome;
use crate::metrics::{RECEIPT_DELAY, RECEIPT_OUTCOMES, RECEIPTS, RECEIPTS_SHED};

/// Every series exists from the start, at zero.
pub fn declare() {
    for event in Event::ALL {
        for outcome in RECEIPT_OUTCOMES {
            RECEIPTS.with([event.as_str(), outcome]).increment(0);
        }
    }
    RECEIPTS_SHED.get().increment(0);
}

/// Counts one request's outcome.
pub fn record(outcome: &Outcome) {
    for (event, counts) in Event::ALL.iter().zip(outcome.by_event) {
        for (label, count) in RECEIPT_OUTCOMES.iter().zip(counts) {
            if count > 0 {
                RECEIPTS.with([event.as_str(), *label]).increment(count);
            }
        }
    }
    for (event, seconds) in &outcome.delays {
        RECEIPT_DELAY.with([event.as_str()]).record(*seconds);
    }
}

/// Counts a request turned away at the bound of writes in flight.
pub fn shed() {
    RECEIPTS_SHED.get().increment(1);
}
