//! Data hygiene, one run: detail rows of finished notifications past the
//! retention are removed (their summary row stays and still answers the
//! status API), then registrations no app refreshed within the maximum age
//! are purged.
//!
//! A run holds the hygiene advisory lock on its own connection, so one
//! replica runs it at a time; the others skip. Every statement is its own
//! short transaction touching at most `batch` rows, and a run stops at its
//! time budget: the next one carries on where it stopped.
//!
//! A run gives way to sends: before each statement it looks whether a
//! notification is being delivered ([`SEND_RECENT`]) and, if one is,
//! stops there (`yielded`) so the heap walk never competes with an alert
//! for PostgreSQL; the actor tries again soon, a bounded number of times
//! ([`actor`]).
//!
//! The purge walks the heap of `registrations` a range of pages at a time
//! (no index on `updated_at`, see V12), resuming from `cursor` across runs;
//! a device is purged when none of its rows was refreshed since the cutoff.
//! Topic subscriber counts are counted from `registrations`, so they follow
//! at their next count.
//!
//! The [`actor`] runs it on a schedule.

pub mod actor;

use std::time::{Duration, Instant};

use chrono::Utc;
use tokio_postgres::Client;

use crate::progress::timings::{reachable, timings};
use crate::store::StoreError;
use crate::store::hygiene::{
    DETAIL_TABLES, DueNotification, due_notifications, mark_details_removed, purge_stale_registrations,
    registration_pages, remove_detail_rows, send_in_progress, settle_timings, try_lock, unlock,
};

/// Pages of `registrations` one purge statement looks at (8 MB with 8 kB
/// pages: tens of thousands of rows, a few milliseconds of reading).
const PAGES_PER_STATEMENT: i64 = 1024;
/// Due notifications read per look at the work list.
const DUE_PER_LOOK: i64 = 100;
/// A notification in flight that made progress this recently is a send
/// going on; one stalled for longer is left to the watchdog.
pub const SEND_RECENT: Duration = Duration::from_secs(300);

/// What a run does and how much of it at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HygienePlan {
    /// Purge devices not refreshed for this long; `None`: never.
    pub registration_max_age: Option<Duration>,
    /// Remove finished notifications' details idle for this long; `None`: never.
    pub detail_retention: Option<Duration>,
    /// Most rows one statement deletes.
    pub batch: u32,
    /// A run starts no statement after this long.
    pub budget: Duration,
    /// Stop before a statement while a send is going on.
    pub yield_to_sends: bool,
}

impl HygienePlan {
    pub fn is_idle(&self) -> bool {
        self.registration_max_age.is_none() && self.detail_retention.is_none()
    }
}

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HygieneReport {
    pub registrations_purged: u64,
    /// Notifications whose details were all removed.
    pub notifications_trimmed: u64,
    /// Detail rows removed, per table of [`DETAIL_TABLES`] (same order).
    pub detail_rows: [u64; DETAIL_TABLES.len()],
    /// Delete statements that removed something, and the most one removed.
    pub statements: u64,
    pub largest_statement: u64,
    /// The purge walked to the end of `registrations` (the next run starts
    /// a new pass).
    pub purge_pass_done: bool,
    /// The budget ran out before the work did.
    pub out_of_time: bool,
    /// A send was going on: the run stopped before the work was done.
    pub yielded: bool,
    pub duration: Duration,
}

impl HygieneReport {
    pub fn detail_rows_total(&self) -> u64 {
        self.detail_rows.iter().sum()
    }

    fn count_statement(&mut self, rows: u64) {
        if rows > 0 {
            self.statements += 1;
            self.largest_statement = self.largest_statement.max(rows);
        }
    }
}

/// Whether a run took place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ran(HygieneReport),
    /// Another session (replica) holds the hygiene lock.
    Skipped,
}

/// One run on `client`, a connection of its own (the lock is the
/// session's). `cursor` is the page the purge resumes from; it is moved on.
pub async fn run(client: &Client, plan: &HygienePlan, cursor: &mut i64) -> Result<Outcome, StoreError> {
    if !try_lock(client).await? {
        return Ok(Outcome::Skipped);
    }
    let started = Instant::now();
    let mut report = HygieneReport::default();
    let worked = work(client, plan, cursor, started, &mut report).await;
    // Closing the session releases the lock too, should this fail.
    let _ = unlock(client).await;
    worked?;
    report.duration = started.elapsed();
    Ok(Outcome::Ran(report))
}

async fn work(
    client: &Client,
    plan: &HygienePlan,
    cursor: &mut i64,
    started: Instant,
    report: &mut HygieneReport,
) -> Result<(), StoreError> {
    let batch = i64::from(plan.batch.max(1));
    // The retention gets the first half of the budget at most, the purge
    // whatever is left.
    if let Some(retention) = plan.detail_retention {
        let deadline = started + plan.budget / 2;
        remove_details(client, plan, retention, batch, deadline, report).await?;
    }
    if report.yielded {
        return Ok(());
    }
    if let Some(max_age) = plan.registration_max_age {
        let deadline = started + plan.budget;
        purge_registrations(client, plan, max_age, batch, deadline, cursor, report).await?;
    }
    Ok(())
}

/// Whether the run stops before its next statement: its time is up
/// (`out_of_time`), or a send is going on and the plan gives way to sends
/// (`yielded`).
async fn must_stop(
    client: &Client,
    plan: &HygienePlan,
    deadline: Instant,
    report: &mut HygieneReport,
) -> Result<bool, StoreError> {
    if Instant::now() >= deadline {
        report.out_of_time = true;
        return Ok(true);
    }
    if plan.yield_to_sends && send_in_progress(client, SEND_RECENT).await? {
        report.yielded = true;
        return Ok(true);
    }
    Ok(false)
}

fn cutoff(age: Duration) -> chrono::DateTime<Utc> {
    let age = chrono::Duration::from_std(age).unwrap_or(chrono::Duration::MAX);
    Utc::now()
        .checked_sub_signed(age)
        .unwrap_or(chrono::DateTime::<Utc>::MIN_UTC)
}

async fn remove_details(
    client: &Client,
    plan: &HygienePlan,
    retention: Duration,
    batch: i64,
    deadline: Instant,
    report: &mut HygieneReport,
) -> Result<(), StoreError> {
    let cutoff = cutoff(retention);
    loop {
        let due = due_notifications(client, cutoff, DUE_PER_LOOK).await?;
        if due.is_empty() {
            return Ok(());
        }
        for notification in &due {
            if must_stop(client, plan, deadline, report).await? {
                return Ok(());
            }
            trim(client, notification, plan, batch, deadline, report).await?;
        }
    }
}

/// Removes one notification's details, table by table; marks it once all
/// are gone (stopped by the deadline, it stays on the work list).
async fn trim(
    client: &Client,
    notification: &DueNotification,
    plan: &HygienePlan,
    batch: i64,
    deadline: Instant,
    report: &mut HygieneReport,
) -> Result<(), StoreError> {
    let id = notification.id;
    if notification.timings_unsettled {
        let reachable = reachable(notification.audience, notification.unregistered);
        let timings = timings(client, id, reachable).await?;
        settle_timings(client, id, timings.as_array()).await?;
    }
    for (table_index, table) in DETAIL_TABLES.iter().enumerate() {
        loop {
            if must_stop(client, plan, deadline, report).await? {
                return Ok(());
            }
            let removed = remove_detail_rows(client, table, id, batch).await?;
            report.detail_rows[table_index] += removed;
            report.count_statement(removed);
            if removed < batch as u64 {
                break;
            }
        }
    }
    mark_details_removed(client, id).await?;
    report.notifications_trimmed += 1;
    Ok(())
}

async fn purge_registrations(
    client: &Client,
    plan: &HygienePlan,
    max_age: Duration,
    batch: i64,
    deadline: Instant,
    cursor: &mut i64,
    report: &mut HygieneReport,
) -> Result<(), StoreError> {
    let cutoff = cutoff(max_age);
    let pages = registration_pages(client).await?;
    if *cursor >= pages {
        *cursor = 0;
    }
    while *cursor < pages {
        if must_stop(client, plan, deadline, report).await? {
            return Ok(());
        }
        let end = *cursor + PAGES_PER_STATEMENT;
        let purged = purge_stale_registrations(client, *cursor, end, cutoff, batch).await?;
        report.registrations_purged += purged;
        report.count_statement(purged);
        // A full batch may have left more in the range: look at it again.
        if purged < batch as u64 {
            *cursor = end;
        }
    }
    *cursor = 0;
    report.purge_pass_done = true;
    Ok(())
}
