//! Every metric the coordinator emits: name, help and labels, declared
//! once here (as quickwit-indexing's `metrics.rs`); the rest of the crate
//! emits through these and spells no metric name. The shared ones
//! (database pool, queue depth, telemetry, `GET /metrics`) are
//! `clarion_runtime::metrics`'.

use clarion_runtime::metrics::{CounterVec, GaugeVec, HistogramVec};

use crate::store::lanes::Lane;

// The API.

/// Requests answered, by method (from a fixed set), route pattern and status.
pub const API_REQUESTS: CounterVec<3> = CounterVec::new(
    "clarion_api_requests_total",
    "HTTP requests answered, by method, route pattern and status",
    ["method", "route", "status"],
);

/// Time to answer a request, by route pattern.
pub const API_REQUEST_DURATION: HistogramVec<1> = HistogramVec::new(
    "clarion_api_request_duration_seconds",
    "Time to answer an HTTP request, in seconds, by route pattern",
    ["route"],
);

/// Sends refused with 429: the key's `sends_per_minute` was used up.
pub const SENDS_RATE_LIMITED: CounterVec<0> = CounterVec::new(
    "clarion_api_sends_rate_limited_total",
    "Sends refused because the API key's sends_per_minute allowance was used up",
    [],
);

/// Re-reads of the API keys file, by outcome (`reloaded`, `invalid`,
/// `unreadable`).
pub const API_KEYS_RELOADS: CounterVec<1> = CounterVec::new(
    "clarion_coordinator_api_keys_reloads_total",
    "Re-reads of the API keys file, by outcome (reloaded, invalid, unreadable)",
    ["outcome"],
);

/// The outcomes of [`API_KEYS_RELOADS`].
pub const API_KEYS_RELOAD_OUTCOMES: [&str; 3] = ["reloaded", "invalid", "unreadable"];

/// Computations of a notification's status or curve (each answers every
/// poller of that view for one refresh interval), by view (`status`,
/// `curve`).
pub const STATUS_COMPUTATIONS: CounterVec<1> = CounterVec::new(
    "clarion_coordinator_status_computations_total",
    "Computations of a notification's status or curve (shared by every poller for CLARION_STATUS_REFRESH_MS), by view (status, curve)",
    ["view"],
);

/// Registration reads (`GET /api/v1/registrations/{token}`), by outcome:
/// `hit` (from memory), `miss` (from the database, kept for the next),
/// `bypass` (from the database: the cache is off, not listening, or not
/// proven caught up in time).
pub const REGISTRATION_READS: CounterVec<1> = CounterVec::new(
    "clarion_coordinator_registration_reads_total",
    "Registration reads, by outcome (hit: from memory, miss: from the database and kept, bypass: from the database, the cache being off or not caught up)",
    ["outcome"],
);

/// The outcomes of [`REGISTRATION_READS`].
pub const REGISTRATION_READ_OUTCOMES: [&str; 3] = ["hit", "miss", "bypass"];

/// 1 while the registration cache listens to registration changes (and so
/// may serve from memory), 0 otherwise.
pub const REGISTRATION_CACHE_LISTENING: GaugeVec<0> = GaugeVec::new(
    "clarion_coordinator_registration_cache_listening",
    "1 while the registration cache listens to registration changes and may serve from memory, 0 while every read goes to the database",
    [],
);

/// The views of [`STATUS_COMPUTATIONS`].
pub const STATUS_VIEWS: [&str; 2] = ["status", "curve"];

/// Admin requests that could not be written to the audit log.
pub const AUDIT_FAILURES: CounterVec<0> = CounterVec::new(
    "clarion_coordinator_audit_failures_total",
    "Admin requests that could not be recorded in the audit log",
    [],
);

// Sending.

/// Send requests answered, by outcome (`accepted`, `replayed`, `conflict`,
/// `failed`) and lane.
pub const NOTIFICATIONS: CounterVec<2> = CounterVec::new(
    "clarion_coordinator_notifications_total",
    "Send requests answered, by outcome (accepted, replayed, conflict, failed) and lane",
    ["outcome", "lane"],
);

/// Notifications stored to be sent later (`send_at`).
pub const NOTIFICATIONS_SCHEDULED: CounterVec<0> = CounterVec::new(
    "clarion_coordinator_notifications_scheduled_total",
    "Notifications accepted with a send_at, to be sent later",
    [],
);

/// Shard jobs committed to the outbox, by lane.
pub const JOBS_PLANNED: CounterVec<1> = CounterVec::new(
    "clarion_coordinator_jobs_planned_total",
    "Shard jobs planned (committed to the outbox), by lane",
    ["lane"],
);

/// Scheduled notifications fired (planned when their time came).
pub const SCHEDULED_FIRED: CounterVec<0> = CounterVec::new(
    "clarion_coordinator_scheduled_fired_total",
    "Scheduled notifications fired",
    [],
);

/// How long after its `send_at` a scheduled notification fired.
pub const SCHEDULED_FIRE_LATENESS: HistogramVec<0> = HistogramVec::new(
    "clarion_coordinator_scheduled_fire_lateness_seconds",
    "How long after its send_at a scheduled notification fired, in seconds",
    [],
);

/// Scheduler rounds that failed (retried on the next).
pub const SCHEDULER_FAILURES: CounterVec<0> = CounterVec::new(
    "clarion_coordinator_scheduler_failures_total",
    "Scheduler rounds that failed; the next round tries again",
    [],
);

// Release.

/// Shard jobs the relay published (broker-confirmed), by lane.
pub const JOBS_PUBLISHED: CounterVec<1> = CounterVec::new(
    "clarion_coordinator_jobs_published_total",
    "Shard jobs published by the job relay (confirmed by the broker), by lane",
    ["lane"],
);

/// Relay rounds that failed (the jobs wait in the outbox).
pub const RELAY_FAILURES: CounterVec<0> = CounterVec::new(
    "clarion_coordinator_relay_failures_total",
    "Job relay rounds that failed; their jobs wait in the outbox for the next",
    [],
);

/// Jobs of the round in flight awaiting their publisher confirms.
pub const RELAY_JOBS_AWAITING_CONFIRM: GaugeVec<0> = GaugeVec::new(
    "clarion_coordinator_relay_jobs_awaiting_confirm",
    "Shard jobs of the relay's round in flight awaiting their publisher confirms",
    [],
);

/// Jobs waiting in the outbox, by lane.
pub const OUTBOX_WAITING_JOBS: GaugeVec<1> = GaugeVec::new(
    "clarion_coordinator_outbox_waiting_jobs",
    "Shard jobs waiting in the outbox to be released, by lane",
    ["lane"],
);

/// Tokens released and not yet reported, by platform.
pub const SCHEDULE_OUTSTANDING_TOKENS: GaugeVec<1> = GaugeVec::new(
    "clarion_coordinator_schedule_outstanding_tokens",
    "Tokens released and not yet reported by the dispatchers, by platform",
    ["platform"],
);

/// Tokens each platform may have outstanding (the release budget).
pub const SCHEDULE_BUDGET_TOKENS: GaugeVec<1> = GaugeVec::new(
    "clarion_coordinator_schedule_budget_tokens",
    "Tokens the relay lets each platform have outstanding, by platform",
    ["platform"],
);

/// The delivery rate the relay measures, by platform.
pub const SCHEDULE_RATE: GaugeVec<1> = GaugeVec::new(
    "clarion_coordinator_schedule_rate_tokens_per_second",
    "Delivery rate the relay measures from the reports, in tokens per second, by platform",
    ["platform"],
);

/// 1 when a platform's dispatchers have stalled, 0 otherwise.
pub const SCHEDULE_STALLED: GaugeVec<1> = GaugeVec::new(
    "clarion_coordinator_schedule_stalled",
    "1 when a platform has work outstanding and reported nothing for a while, by platform",
    ["platform"],
);

// Progress and the reports.

/// Messages consumed, by kind (`job`, `delivery`, `cleanup`, `dead_letter`)
/// and outcome.
pub const REPORTS: CounterVec<2> = CounterVec::new(
    "clarion_coordinator_reports_total",
    "Messages consumed from the reports, cleanup and dead-letter queues, by kind and outcome",
    ["kind", "outcome"],
);

/// Notifications completed.
pub const NOTIFICATIONS_COMPLETED: CounterVec<0> = CounterVec::new(
    "clarion_coordinator_notifications_completed_total",
    "Notifications completed",
    [],
);

/// Share of completed notifications that met 90in2.
pub const NINETY_IN_TWO: GaugeVec<0> = GaugeVec::new(
    "clarion_coordinator_ninety_in_two_ratio",
    "Share of the notifications completed by this process that reached 90% of their devices within 2 minutes",
    [],
);

/// Time for a completed notification to reach a share of its devices, by
/// quantile (`t50`, `t90`, `t99`).
pub const TIME_TO_DELIVERY: HistogramVec<1> = HistogramVec::new(
    "clarion_coordinator_time_to_delivery_seconds",
    "Time for a completed notification to reach a share of its devices, in seconds, by quantile",
    ["quantile"],
);

/// Segments whose gone and invalid tokens the safety valve kept.
pub const VALVE_TRIPPED: CounterVec<1> = CounterVec::new(
    "clarion_coordinator_valve_tripped_total",
    "Times the safety valve kept a segment's gone and invalid tokens instead of deleting them, by segment",
    ["segment"],
);

/// Registrations deleted for tokens the providers called gone or invalid.
pub const REGISTRATIONS_DELETED: CounterVec<0> = CounterVec::new(
    "clarion_coordinator_registrations_deleted_total",
    "Registrations deleted because the provider called their token gone or invalid",
    [],
);

/// Notifications the watchdog failed because they stopped making progress.
pub const NOTIFICATIONS_STALLED: CounterVec<0> = CounterVec::new(
    "clarion_coordinator_notifications_stalled_total",
    "Notifications failed by the watchdog because they stopped making progress",
    [],
);

// Data hygiene.

/// Hygiene runs, by outcome (`ran`, `yielded`: stopped for a send going
/// on, `skipped`: another replica held the lock, `failed`).
pub const HYGIENE_RUNS: CounterVec<1> = CounterVec::new(
    "clarion_coordinator_hygiene_runs_total",
    "Data hygiene runs, by outcome (ran, yielded, skipped, failed)",
    ["outcome"],
);

/// Registrations no app refreshed within the maximum age, purged.
pub const HYGIENE_REGISTRATIONS_PURGED: CounterVec<0> = CounterVec::new(
    "clarion_coordinator_hygiene_registrations_purged_total",
    "Registrations purged by data hygiene (not refreshed within the maximum age)",
    [],
);

/// Notifications whose detail rows were removed.
pub const HYGIENE_NOTIFICATIONS_TRIMMED: CounterVec<0> = CounterVec::new(
    "clarion_coordinator_hygiene_notifications_trimmed_total",
    "Finished notifications whose detail rows data hygiene removed",
    [],
);

/// Detail rows removed, by table.
pub const HYGIENE_DETAIL_ROWS_REMOVED: CounterVec<1> = CounterVec::new(
    "clarion_coordinator_hygiene_detail_rows_removed_total",
    "Detail rows of finished notifications removed by data hygiene, by table",
    ["table"],
);

/// How long the last hygiene run took.
pub const HYGIENE_LAST_RUN_DURATION: GaugeVec<0> = GaugeVec::new(
    "clarion_coordinator_hygiene_last_run_duration_seconds",
    "Duration of the last data hygiene run, in seconds",
    [],
);

// Device receipts.

/// Receipts by event (`received`, `opened`) and outcome (`accepted`,
/// `duplicate`, `ignored`), counted once per request.
pub const RECEIPTS: CounterVec<2> = CounterVec::new(
    "clarion_receipts_total",
    "Device receipts by event (received, opened) and outcome (accepted, duplicate, ignored)",
    ["event", "outcome"],
);

/// The outcomes of [`RECEIPTS`].
pub const RECEIPT_OUTCOMES: [&str; 3] = ["accepted", "duplicate", "ignored"];

/// Seconds from the send to the (clamped) receipt time of each counted
/// receipt, by event.
pub const RECEIPT_DELAY: HistogramVec<1> = HistogramVec::new(
    "clarion_receipts_delay_seconds",
    "Seconds from the send to each counted device receipt, by event",
    ["event"],
);

/// Receipt requests turned away with 503 because the receipt writes in
/// flight were at their bound.
pub const RECEIPTS_SHED: CounterVec<0> = CounterVec::new(
    "clarion_receipts_shed_requests_total",
    "Receipt requests answered 503: the queue of receipt writes was full",
    [],
);

// The group commit of app-facing writes.

/// Batch transactions run, by kind (`registrations`, `receipts`).
pub const WRITE_BATCHES: CounterVec<1> = CounterVec::new(
    "clarion_write_batches_total",
    "Group-commit batch transactions run, by kind (registrations, receipts)",
    ["kind"],
);

/// Requests per batch transaction, by kind.
pub const WRITE_BATCH_REQUESTS: HistogramVec<1> = HistogramVec::new(
    "clarion_write_batch_requests",
    "Requests written by one group-commit batch transaction, by kind",
    ["kind"],
);

/// Batches run again one write per savepoint because a write failed.
pub const WRITE_BATCH_RETRIES: CounterVec<1> = CounterVec::new(
    "clarion_write_batch_retries_total",
    "Group-commit batches run again with one savepoint per write because a write of theirs failed, by kind",
    ["kind"],
);

/// Writes answered 503 at once: their kind's queue was full.
pub const WRITE_SHED: CounterVec<1> = CounterVec::new(
    "clarion_write_shed_requests_total",
    "Writes answered 503 at once because their kind's group-commit queue was full, by kind",
    ["kind"],
);

/// Describes the group-commit metrics and starts `kind`'s counters at zero.
pub fn declare_write_kind(kind: &'static str) {
    WRITE_BATCHES.describe();
    WRITE_BATCH_REQUESTS.describe();
    WRITE_BATCH_RETRIES.describe();
    WRITE_SHED.describe();
    WRITE_BATCHES.with([kind]).increment(0);
    WRITE_BATCH_RETRIES.with([kind]).increment(0);
    WRITE_SHED.with([kind]).increment(0);
}

// Live Activities.

/// Activity requests, by event (`created`, `updated`, `ended`, `replayed`,
/// `deleted`, `full`: refused at Apple's channel limit).
pub const LIVE_ACTIVITY_REQUESTS: CounterVec<1> = CounterVec::new(
    "clarion_coordinator_live_activity_requests_total",
    "Live Activity requests committed, by event (created, updated, ended, replayed, deleted, full: refused at Apple's 10,000 channels per app and environment)",
    ["event"],
);

/// Channel commands the command relay published (broker-confirmed), by kind.
pub const LIVE_ACTIVITY_COMMANDS_PUBLISHED: CounterVec<1> = CounterVec::new(
    "clarion_coordinator_live_activity_commands_published_total",
    "Live Activity channel commands published to deliver.ios.channels (confirmed by the broker), by kind (create_channel, broadcast, delete_channel)",
    ["kind"],
);

/// Command relay rounds that failed (the commands wait in the outbox).
pub const LIVE_ACTIVITY_RELAY_FAILURES: CounterVec<0> = CounterVec::new(
    "clarion_coordinator_live_activity_relay_failures_total",
    "Live Activity command relay rounds that failed; their commands wait in the outbox for the next",
    [],
);

/// Channel reports recorded, by outcome (`created`, `sent`, `deleted`,
/// `refused`, `failed`, `duplicate`).
pub const LIVE_ACTIVITY_REPORTS: CounterVec<1> = CounterVec::new(
    "clarion_coordinator_live_activity_reports_total",
    "Live Activity channel reports recorded, by outcome (created, sent, deleted, refused, failed; duplicate: recorded before)",
    ["outcome"],
);

/// Channels of activities ended a day ago whose deletes the sweep queued.
pub const LIVE_ACTIVITY_CHANNELS_SWEPT: CounterVec<0> = CounterVec::new(
    "clarion_coordinator_live_activity_channels_swept_total",
    "Broadcast channels of Live Activities ended a day ago whose deletes the sweep queued",
    [],
);

/// Gives the recorder every metric's help text, and starts at zero the
/// counters worth an alert, instead of letting them appear with their
/// first event (an alert on `rate()` needs a series). Called once at start.
pub fn declare() {
    for counter in [
        &SENDS_RATE_LIMITED,
        &AUDIT_FAILURES,
        &NOTIFICATIONS_SCHEDULED,
        &SCHEDULED_FIRED,
        &SCHEDULER_FAILURES,
        &RELAY_FAILURES,
        &NOTIFICATIONS_COMPLETED,
        &REGISTRATIONS_DELETED,
        &NOTIFICATIONS_STALLED,
        &HYGIENE_REGISTRATIONS_PURGED,
        &HYGIENE_NOTIFICATIONS_TRIMMED,
        &RECEIPTS_SHED,
        &LIVE_ACTIVITY_RELAY_FAILURES,
        &LIVE_ACTIVITY_CHANNELS_SWEPT,
    ] {
        counter.describe();
    }
    for counter in [
        &API_KEYS_RELOADS,
        &JOBS_PLANNED,
        &JOBS_PUBLISHED,
        &VALVE_TRIPPED,
        &HYGIENE_RUNS,
        &HYGIENE_DETAIL_ROWS_REMOVED,
        &LIVE_ACTIVITY_REQUESTS,
        &LIVE_ACTIVITY_COMMANDS_PUBLISHED,
        &LIVE_ACTIVITY_REPORTS,
    ] {
        counter.describe();
    }
    API_REQUESTS.describe();
    RECEIPTS.describe();
    RECEIPT_DELAY.describe();
    NOTIFICATIONS.describe();
    REPORTS.describe();
    for gauge in [
        &RELAY_JOBS_AWAITING_CONFIRM,
        &NINETY_IN_TWO,
        &HYGIENE_LAST_RUN_DURATION,
    ] {
        gauge.describe();
    }
    for gauge in [
        &OUTBOX_WAITING_JOBS,
        &SCHEDULE_OUTSTANDING_TOKENS,
        &SCHEDULE_BUDGET_TOKENS,
        &SCHEDULE_RATE,
        &SCHEDULE_STALLED,
    ] {
        gauge.describe();
    }
    SCHEDULED_FIRE_LATENESS.describe();
    API_REQUEST_DURATION.describe();
    TIME_TO_DELIVERY.describe();

    for lane in Lane::ALL {
        JOBS_PUBLISHED.with([lane.as_str()]).increment(0);
        JOBS_PLANNED.with([lane.as_str()]).increment(0);
    }
    for outcome in API_KEYS_RELOAD_OUTCOMES {
        API_KEYS_RELOADS.with([outcome]).increment(0);
    }
    SENDS_RATE_LIMITED.get().increment(0);
    STATUS_COMPUTATIONS.describe();
    REGISTRATION_READS.describe();
    REGISTRATION_CACHE_LISTENING.describe();
    REGISTRATION_CACHE_LISTENING.get().set(0.0);
    for outcome in REGISTRATION_READ_OUTCOMES {
        REGISTRATION_READS.with([outcome]).increment(0);
    }
    for view in STATUS_VIEWS {
        STATUS_COMPUTATIONS.with([view]).increment(0);
    }
}
