//! A delivery report as the coordinator reads it from the reports queue.
#![no_main]

use clarion_fuzz::decode_and_round_trip;
use clarion_proto::DeliveryReport;
use clarion_proto::platform::segment;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(report) = decode_and_round_trip::<DeliveryReport>(data) {
        // Eight u32 counters never overflow their u64 sum.
        assert!(report.counts.total() <= 8 * u64::from(u32::MAX));
        let _ = segment(report.platform, report.environment);
        let _ = report.batch_id.to_string();
    }
});
