//! Every metric the harvester emits: name, help and labels, declared once
//! here (as quickwit-indexing's `metrics.rs`); the rest of the crate emits
//! through these and spells no metric name. The shared ones (database
//! pool, queue depth, telemetry) are `clarion_runtime::metrics`'.

use clarion_runtime::metrics::{CounterVec, HistogramVec};

/// Shard jobs finished, by `outcome`: `harvested`, or `failed` (given back
/// to the queue to be retried, or dead-lettered after its last attempt).
pub const JOBS: CounterVec<1> = CounterVec::new(
    "clarion_harvester_jobs_total",
    "Shard jobs finished, by outcome (harvested, failed)",
    ["outcome"],
);

/// Tokens the harvested jobs found, by `platform`.
pub const TOKENS: CounterVec<1> = CounterVec::new(
    "clarion_harvester_tokens_total",
    "Device tokens harvested into batches, by platform",
    ["platform"],
);

/// Token batches the harvested jobs published.
pub const BATCHES: CounterVec<0> = CounterVec::new(
    "clarion_harvester_batches_total",
    "Token batches published by harvested jobs",
    [],
);

/// Batches a retried job did not publish again: an earlier attempt had
/// (its ledger says so).
pub const BATCHES_SKIPPED: CounterVec<0> = CounterVec::new(
    "clarion_harvester_batches_skipped_total",
    "Token batches not published again because an earlier attempt of the job had published them",
    [],
);

/// How long a harvested job took, claim to last confirm.
pub const JOB_DURATION: HistogramVec<0> = HistogramVec::new(
    "clarion_harvester_job_duration_seconds",
    "Time to harvest one shard job, in seconds",
    [],
);

/// Shard jobs with a replica configured, by where they were read:
/// `replica` (it had replayed the job's position), `behind` (it had not
/// within the wait: read from the primary), `unusable` (unreachable or
/// failing: read from the primary).
pub const REPLICA_READS: CounterVec<1> = CounterVec::new(
    "clarion_harvester_replica_reads_total",
    "Shard jobs of a harvester with a replica, by where they were read (replica, behind, unusable)",
    ["outcome"],
);

/// Gives the recorder every metric's help text; called once at start.
pub fn describe() {
    REPLICA_READS.describe();
    JOBS.describe();
    TOKENS.describe();
    BATCHES.describe();
    BATCHES_SKIPPED.describe();
    JOB_DURATION.describe();
}
