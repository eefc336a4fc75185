//! Reading the harvest from a replica (`CLARION_HARVEST_DATABASE_URL`):
//! the heaviest read of a send leaves the primary, and still misses no
//! device registered before the send. A shard job carries the primary's
//! WAL position taken after the send was committed; the replica serves the
//! job's stream once it has replayed that position. A replica further
//! behind than `CLARION_HARVEST_REPLICA_WAIT_MS`, unreachable, or a job
//! without a position (an older coordinator) is read from the primary.
//! Everything that writes (the published-batch ledger) stays on the
//! primary.

use std::time::Duration;

use clarion_proto::ShardJob;
use clarion_runtime::PgPool;
use clarion_runtime::db::{DbError, PgConnection};
use tokio::time::Instant;
use tracing::warn;

use crate::metrics;

/// How often the replay position is asked while waiting.
const POLL: Duration = Duration::from_millis(5);

/// A replica to read from, and how long to wait for it to catch up.
#[derive(Clone)]
pub struct Replica {
    pub pool: PgPool,
    pub wait: Duration,
}

/// A session to stream `job`'s registrations from: the replica's once it
/// has replayed the job's position, else the primary's.
pub async fn session<'a>(
    job: &ShardJob,
    primary: &'a PgPool,
    replica: Option<&'a Replica>,
) -> Result<PgConnection<'a>, DbError> {
    if let (Some(replica), Some(lsn)) = (replica, job.primary_lsn.as_deref()) {
        match caught_up(replica, lsn).await {
            Ok(Some(conn)) => {
                metrics::REPLICA_READS.with(["replica"]).increment(1);
                return Ok(conn);
            }
            Ok(None) => metrics::REPLICA_READS.with(["behind"]).increment(1),
            Err(err) => {
                warn!(error = %err, "replica unusable; harvesting from the primary");
                metrics::REPLICA_READS.with(["unusable"]).increment(1);
            }
        }
    }
    Ok(primary.get().await?)
}

/// A replica session once it has replayed `lsn`; `None` when it has not
/// within the wait.
async fn caught_up<'a>(replica: &'a Replica, lsn: &str) -> Result<Option<PgConnection<'a>>, DbError> {
    let deadline = Instant::now() + replica.wait;
    let conn = replica.pool.get().await?;
    let statement = conn
        .prepare("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn")
        .await
        .map_err(DbError::Query)?;
    loop {
        let row = conn
            .query_one(&statement, &[&lsn])
            .await
            .map_err(DbError::Query)?;
        // NULL on a server that is not a standby: it has everything.
        if row.get::<_, Option<bool>>(0).unwrap_or(true) {
            return Ok(Some(conn));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(POLL).await;
    }
}
