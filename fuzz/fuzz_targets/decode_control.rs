//! A control message (cancel, mark) as every harvester and dispatcher reads
//! it from the control log.
#![no_main]

use clarion_fuzz::decode_and_round_trip;
use clarion_proto::Control;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode_and_round_trip::<Control>(data);
});
