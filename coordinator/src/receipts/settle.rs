//! The settler: counts each sent notification's reporting audience once,
//! shortly after its send, and stores its device-side 90in2 once two
//! minutes (and a few seconds for the receipts in flight then) have passed.
//! Every replica runs it; both stores keep the first value, so two replicas
//! settling the same notification agree.

use std::time::Duration;

use chrono::Utc;
use clarion_runtime::PgPool;
use clarion_runtime::db::DbError;
use tracing::{debug, warn};

use super::figures::verdict;
use super::store;
use crate::store::StoreError;

/// How often the settler looks: reporting audiences appear in the status
/// within about this long of the send.
pub const SETTLE_EVERY: Duration = Duration::from_secs(2);
/// Notifications settled per look (a look is a handful of short queries
/// and at most this many reporting counts, done one after another).
const PER_LOOK: i64 = 20;

/// Runs the settler until the task is aborted.
pub fn spawn(pool: PgPool) -> tokio::task::JoinHandle<()> {
    actix_web::rt::spawn(async move {
        let mut tick = tokio::time::interval(SETTLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(err) = settle_once(&pool).await {
                warn!(error = %err, "settling device receipts failed; trying again");
            }
        }
    })
}

/// One look: counts what is uncounted and stores the verdicts due.
pub async fn settle_once(pool: &PgPool) -> Result<usize, StoreError> {
    let conn = pool.get().await.map_err(DbError::from)?;
    let due = store::unsettled(&*conn, PER_LOOK).await?;
    for item in &due {
        if !item.counted {
            let reporting = store::count_reporting(&*conn, &item.target).await?;
            store::store_reporting(&*conn, item.target.id, reporting).await?;
            debug!(notification.id = %item.target.id, reporting, "reporting audience counted");
        }
        let found = store::aggregates(&*conn, item.target.id).await?;
        if let Some(verdict) = verdict(&found, item.target.sent_at, Utc::now())
            && (Utc::now() - item.target.sent_at).num_seconds() >= 125
        {
            store::store_verdict(&*conn, item.target.id, verdict).await?;
            debug!(notification.id = %item.target.id, verdict, "device-side 90in2 stored");
        }
    }
    Ok(due.len())
}
