//! A token batch as a dispatcher reads it from its deliver queue.
#![no_main]

use clarion_fuzz::{decode_and_round_trip, exercise_notification};
use clarion_proto::TokenBatch;
use clarion_proto::platform::{normalize_token, token_prefix};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(batch) = decode_and_round_trip::<TokenBatch>(data) {
        let _ = batch.tokens_digest();
        let _ = batch.batch_id.to_string();
        for token in &batch.tokens {
            let _ = token_prefix(token);
            let _ = normalize_token(batch.platform, token);
        }
        exercise_notification(&batch.notification);
    }
});
