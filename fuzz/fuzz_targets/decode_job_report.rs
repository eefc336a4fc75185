//! A job report as the coordinator reads it from the reports queue.
#![no_main]

use clarion_fuzz::decode_and_round_trip;
use clarion_proto::{JobOutcome, JobReport};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(report) = decode_and_round_trip::<JobReport>(data) {
        if let JobOutcome::Harvested { ios, android, .. } = report.outcome {
            let _ = ios.checked_add(android);
        }
    }
});
