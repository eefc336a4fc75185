//! The scheduler: fires scheduled notifications when their time comes.
//!
//! Every [`EVERY`] it fires, one transaction each, the notifications due
//! ([`crate::send::send_at::fire_next`]), at most `ROUND_LIMIT` a round, one
//! round at a time. The database decides what is due and who fires it, so
//! every replica runs a scheduler, a restart loses nothing, and each
//! notification fires once. Counted in
//! `clarion_coordinator_scheduled_fired_total` and
//! `clarion_coordinator_scheduled_fire_lateness_seconds`; rounds that fail
//! in `clarion_coordinator_scheduler_failures_total`.

use std::time::Duration;

use actix::prelude::*;
use clarion_runtime::PgPool;
use tracing::warn;

use super::topic_counter::TopicCounter;
use crate::metrics;
use crate::release::relay::JobRelay;
use crate::send::accept::Sending;
use crate::send::send_at::{Fired, fire_next};
use crate::stop::Stop;

/// How often the scheduler looks for notifications due: a notification
/// fires at most this long (plus its planning) after its time.
pub const EVERY: Duration = Duration::from_millis(250);
/// Notifications fired in one round at most; the next round (one tick
/// later) goes on. Keeps a round short when thousands fall due at once.
const ROUND_LIMIT: usize = 64;

pub struct Scheduler {
    pool: PgPool,
    topic_counter: Addr<TopicCounter>,
    relay: Addr<JobRelay>,
    tokens_per_job: u64,
    /// A round is running (at most one at a time).
    firing: bool,
}

impl Scheduler {
    pub fn new(
        pool: PgPool,
        topic_counter: Addr<TopicCounter>,
        relay: Addr<JobRelay>,
        tokens_per_job: u64,
    ) -> Self {
        Self {
            pool,
            topic_counter,
            relay,
            tokens_per_job,
            firing: false,
        }
    }

    fn fire(&mut self, ctx: &mut Context<Self>) {
        if self.firing {
            return;
        }
        self.firing = true;
        let (pool, topic_counter, relay) =
            (self.pool.clone(), self.topic_counter.clone(), self.relay.clone());
        let tokens_per_job = self.tokens_per_job;
        let round = async move {
            let sending = Sending {
                pool: &pool,
                topic_counter: &topic_counter,
                relay: &relay,
                tokens_per_job,
            };
            for _ in 0..ROUND_LIMIT {
                match fire_next(sending).await {
                    Ok(Some(Fired::Planned { .. } | Fired::Failed { .. })) => continue,
                    Ok(None) => break,
                    Err(err) => {
                        warn!(error = %err, "scheduled notifications could not be fired; retrying");
                        metrics::SCHEDULER_FAILURES.get().increment(1);
                        break;
                    }
                }
            }
        };
        ctx.spawn(
            round
                .into_actor(self)
                .map(|(), scheduler, _| scheduler.firing = false),
        );
    }
}

impl Actor for Scheduler {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // No mailbox traffic but `Stop`: the scheduler runs on its own clock.
        self.fire(ctx);
        ctx.run_interval(EVERY, |scheduler, ctx| scheduler.fire(ctx));
    }
}

impl Handler<Stop> for Scheduler {
    type Result = ();

    fn handle(&mut self, _msg: Stop, ctx: &mut Self::Context) {
        // A round cut short rolls back: what it had not committed fires
        // on another replica, or after the restart.
        ctx.stop();
    }
}
