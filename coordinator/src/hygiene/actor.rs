//! The hygiene actor: runs [`crate::hygiene::run`] on a schedule — soon
//! after start, then every `CLARION_HYGIENE_INTERVAL_SECS` — on a
//! connection opened for the run (the advisory lock belongs to that
//! session, and closing it releases the lock whatever happens), logs one
//! line per run with its figures and counts them:
//!
//! - `clarion_coordinator_hygiene_runs_total{outcome}` (`ran`, `yielded`:
//!   stopped for a send going on, `skipped`: another replica held the
//!   lock, `failed`);
//! - `clarion_coordinator_hygiene_registrations_purged_total`;
//! - `clarion_coordinator_hygiene_detail_rows_removed_total{table}`;
//! - `clarion_coordinator_hygiene_notifications_trimmed_total`;
//! - `clarion_coordinator_hygiene_last_run_duration_seconds` (a gauge).
//!
//! A run that gave way to a send is tried again [`RETRY_AFTER_YIELD`]
//! later, not an interval later; after [`MOST_YIELDS_IN_A_ROW`] of them
//! (sends all the time) the next run does not give way, so hygiene is
//! deferred, never starved.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use bb8::ManageConnection;
use clarion_runtime::db::{DbError, Manager};
use tracing::{info, warn};

use crate::hygiene::{HygienePlan, HygieneReport, Outcome, run};
use crate::metrics;
use crate::stop::Stop;
use crate::store::StoreError;
use crate::store::hygiene::DETAIL_TABLES;

/// The first run comes this long after start (or after one interval, if
/// shorter): soon, but not in the middle of a rolling start.
const FIRST_RUN_AFTER: Duration = Duration::from_secs(30);
/// A run that gave way to a send is tried again this long after.
pub const RETRY_AFTER_YIELD: Duration = Duration::from_secs(60);
/// Runs in a row that may give way to sends (an hour of them at most);
/// the next one runs whatever is going on.
pub const MOST_YIELDS_IN_A_ROW: u32 = 60;

pub struct Hygiene {
    connections: Arc<Manager>,
    plan: HygienePlan,
    every: Duration,
    /// Page of `registrations` the purge resumes from.
    cursor: i64,
    /// A run is going on (at most one at a time).
    running: bool,
    /// Runs in a row that gave way to a send.
    yields_in_a_row: u32,
    /// A retry after a yield is scheduled (at most one at a time).
    retry_pending: bool,
}

impl Hygiene {
    /// `every`: time between runs; zero (or a plan with nothing to do)
    /// never runs.
    pub fn new(connections: Manager, plan: HygienePlan, every: Duration) -> Self {
        Self {
            connections: Arc::new(connections),
            plan,
            every,
            cursor: 0,
            running: false,
            yields_in_a_row: 0,
            retry_pending: false,
        }
    }

    fn start_run(&mut self, ctx: &mut Context<Self>) {
        if self.running {
            return;
        }
        self.running = true;
        let connections = self.connections.clone();
        let mut plan = self.plan;
        if self.yields_in_a_row >= MOST_YIELDS_IN_A_ROW {
            plan.yield_to_sends = false;
            info!(
                yields = self.yields_in_a_row,
                "data hygiene runs beside the sends going on: it gave way to them too often in a row"
            );
        }
        let mut cursor = self.cursor;
        let started = Instant::now();
        let work = async move {
            let client = connections
                .connect()
                .await
                .map_err(|err| DbError::from(bb8::RunError::User(err)))?;
            let outcome = run(&client, &plan, &mut cursor).await?;
            Ok::<_, StoreError>((outcome, cursor))
        };
        ctx.spawn(work.into_actor(self).map(move |ran, hygiene, ctx| {
            hygiene.running = false;
            match ran {
                Ok((Outcome::Ran(report), cursor)) => {
                    hygiene.cursor = cursor;
                    announce(&report);
                    if report.yielded {
                        hygiene.yields_in_a_row += 1;
                        if !hygiene.retry_pending {
                            hygiene.retry_pending = true;
                            ctx.run_later(RETRY_AFTER_YIELD, |hygiene, ctx| {
                                hygiene.retry_pending = false;
                                hygiene.start_run(ctx);
                            });
                        }
                    } else {
                        hygiene.yields_in_a_row = 0;
                    }
                }
                Ok((Outcome::Skipped, _)) => {
                    metrics::HYGIENE_RUNS.with(["skipped"]).increment(1);
                    info!("data hygiene skipped: another replica holds its lock");
                }
                Err(err) => {
                    metrics::HYGIENE_RUNS.with(["failed"]).increment(1);
                    metrics::HYGIENE_LAST_RUN_DURATION
                        .get()
                        .set(started.elapsed().as_secs_f64());
                    warn!(error = %err, "data hygiene run failed; the next run carries on");
                }
            }
        }));
    }
}

/// Logs and counts what a run did.
fn announce(report: &HygieneReport) {
    let outcome = if report.yielded { "yielded" } else { "ran" };
    metrics::HYGIENE_RUNS.with([outcome]).increment(1);
    metrics::HYGIENE_REGISTRATIONS_PURGED
        .get()
        .increment(report.registrations_purged);
    metrics::HYGIENE_NOTIFICATIONS_TRIMMED
        .get()
        .increment(report.notifications_trimmed);
    for (table, rows) in DETAIL_TABLES.iter().zip(report.detail_rows) {
        metrics::HYGIENE_DETAIL_ROWS_REMOVED
            .with([*table])
            .increment(rows);
    }
    metrics::HYGIENE_LAST_RUN_DURATION
        .get()
        .set(report.duration.as_secs_f64());
    info!(
        registrations_purged = report.registrations_purged,
        notifications_trimmed = report.notifications_trimmed,
        detail_rows_removed = report.detail_rows_total(),
        statements = report.statements,
        purge_pass_done = report.purge_pass_done,
        out_of_time = report.out_of_time,
        yielded_to_a_send = report.yielded,
        duration_ms = report.duration.as_millis() as u64,
        "{}",
        if report.yielded {
            "data hygiene run stopped for a send going on; it carries on in a minute"
        } else {
            "data hygiene run"
        }
    );
}

impl Actor for Hygiene {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // No mailbox traffic but Stop: it only runs on its own schedule.
        if self.every.is_zero() || self.plan.is_idle() {
            info!("data hygiene is off");
            return;
        }
        ctx.run_later(FIRST_RUN_AFTER.min(self.every), |hygiene, ctx| {
            hygiene.start_run(ctx)
        });
        ctx.run_interval(self.every, |hygiene, ctx| hygiene.start_run(ctx));
    }
}

impl Handler<Stop> for Hygiene {
    type Result = ();

    /// A run going on is dropped with its connection: its statements are
    /// each committed or not, and the next start carries on.
    fn handle(&mut self, _msg: Stop, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
