//! The watchdog: fails notifications that stopped making progress, so every
//! notification reaches a final status unaided.
//!
//! Progress is any counted job or delivery report (each moves the row's
//! `updated_at`). A notification in flight with none for
//! `CLARION_STALL_SECS`, and no job still waiting in the outbox (those go
//! out when RabbitMQ is back), is marked `failed` with a reason that says
//! what is unaccounted for (jobs and batches never reported), logged as an error and counted in
//! `clarion_coordinator_notifications_stalled_total`. Reports that arrive
//! later are still counted; the status stays `failed`, and once every job
//! and batch is reported the reason says so (and when). Several coordinator
//! replicas may run it: the one `UPDATE` decides, so each notification is
//! failed (and logged) once.

use std::time::Duration;

use actix::prelude::*;
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use tracing::{error, warn};

use crate::metrics;
use crate::stop::Stop;
use crate::store::StoreError;
use crate::store::notifications::{Stalled, fail_stalled};

/// Longest pause between two looks: a stall is noticed at most this long
/// (or a tenth of the stall time, if shorter) after it passes the limit.
const MAX_LOOK_EVERY: Duration = Duration::from_secs(30);

pub struct Watchdog {
    pool: PgPool,
    stall: Duration,
    /// A look is running (at most one at a time).
    looking: bool,
}

impl Watchdog {
    pub fn new(pool: PgPool, stall: Duration) -> Self {
        Self {
            pool,
            stall,
            looking: false,
        }
    }

    fn look(&mut self, ctx: &mut Context<Self>) {
        if self.looking {
            return;
        }
        self.looking = true;
        let pool = self.pool.clone();
        let stall = self.stall;
        let look = async move {
            let conn = pool.get().await.map_err(DbError::from)?;
            fail_stalled(&*conn, stall).await
        };
        ctx.spawn(
            look.into_actor(self)
                .map(|looked: Result<Vec<Stalled>, StoreError>, watchdog, _| {
                    watchdog.looking = false;
                    match looked {
                        Ok(stalled) => {
                            for notification in stalled {
                                metrics::NOTIFICATIONS_STALLED.get().increment(1);
                                error!(
                                    notification.id = %notification.id,
                                    reason = %notification.reason,
                                    "notification stalled; failed by the watchdog"
                                );
                            }
                        }
                        Err(err) => warn!(error = %err, "watchdog could not look for stalled notifications"),
                    }
                }),
        );
    }
}

impl Actor for Watchdog {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // No mailbox traffic: the watchdog only runs on its own schedule.
        let every = (self.stall / 10).clamp(Duration::from_millis(100), MAX_LOOK_EVERY);
        ctx.run_interval(every, |watchdog, ctx| watchdog.look(ctx));
    }
}

impl Handler<Stop> for Watchdog {
    type Result = ();

    fn handle(&mut self, _msg: Stop, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
