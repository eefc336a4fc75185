//! A shard job as the harvester reads it from the harvest queue.
#![no_main]

use clarion_fuzz::{decode_and_round_trip, exercise_notification};
use clarion_proto::{SHARD_SPACE, ShardJob};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(job) = decode_and_round_trip::<ShardJob>(data) {
        let shards = job.shards;
        assert!(shards.start() < shards.end() && shards.end() <= SHARD_SPACE);
        let parts = shards.split(job.jobs_planned.min(u32::from(u16::MAX)) as u16);
        assert_eq!(parts.iter().map(|p| p.len()).sum::<u16>(), shards.len());
        exercise_notification(&job.notification);
    }
});
