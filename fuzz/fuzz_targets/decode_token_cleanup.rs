//! A token cleanup as the coordinator reads it from the cleanup queue.
#![no_main]

use clarion_fuzz::decode_and_round_trip;
use clarion_proto::TokenCleanup;
use clarion_proto::platform::{canonical_token, segment};
use clarion_proto::shard_of;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(cleanup) = decode_and_round_trip::<TokenCleanup>(data) {
        let _ = segment(cleanup.platform, cleanup.environment);
        for token in &cleanup.tokens {
            let _ = shard_of(&canonical_token(token));
        }
    }
});
