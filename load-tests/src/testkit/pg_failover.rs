//! Failover of the kit's PostgreSQL pair ([`PgStandbyPair`]): the standby
//! made synchronous (`synchronous_standby_names`, so a commit the
//! primary acknowledges is on the standby's disk), the URL services are
//! given for both servers (`target_session_attrs=read-write`: a session
//! goes to whichever of them takes writes), and the failover itself in
//! the order that loses nothing: the primary stopped first (a fast
//! shutdown sends its last WAL to the standby), then `pg_ctl promote`.
//! The old primary is fenced: its data directory is turned into a
//! standby of the new primary, so if it is ever started again it comes up
//! read-only and a read-write session never lands there.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::pg_server::{append, hand_over};
use super::pg_standby::{PgStandbyPair, SUPERUSER, connect};

/// How long the standby may take to become synchronous.
const SYNC_PATIENCE: Duration = Duration::from_secs(30);

impl PgStandbyPair {
    /// URL of database `database` on both servers, the primary first, for
    /// sessions that must write: libpq's (and tokio-postgres') multi-host
    /// form with `target_session_attrs=read-write`.
    pub fn failover_url(&self, database: &str) -> String {
        format!(
            "postgres://{SUPERUSER}@127.0.0.1:{},127.0.0.1:{}/{database}?target_session_attrs=read-write",
            self.primary_port, self.standby_port
        )
    }

    /// Makes the standby synchronous (`synchronous_standby_names = '*'`,
    /// `synchronous_commit = on`: a commit returns once the standby has
    /// flushed it) and waits until the primary reports it `sync`. Set on
    /// the primary only (`ALTER SYSTEM`), after the copy: the standby,
    /// once promoted, has no standby to wait for.
    pub async fn require_synchronous(&self) -> Result<()> {
        let primary = connect(&self.primary_url("postgres")).await?;
        // One statement each: ALTER SYSTEM refuses a transaction block.
        for statement in [
            "ALTER SYSTEM SET synchronous_standby_names = '*'",
            "ALTER SYSTEM SET synchronous_commit = 'on'",
            "SELECT pg_reload_conf()",
        ] {
            primary.batch_execute(statement).await?;
        }
        let started = Instant::now();
        loop {
            let synchronous = primary
                .query_opt("SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'", &[])
                .await?;
            if synchronous.is_some() {
                return Ok(());
            }
            if started.elapsed() > SYNC_PATIENCE {
                bail!("the standby did not become synchronous within {SYNC_PATIENCE:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Fails over (blocking, a few seconds): stops the primary (`-m fast`:
    /// sessions ended, the shutdown checkpoint streamed to the standby),
    /// promotes the standby and waits until it takes writes, then fences
    /// the old primary (see [`PgStandbyPair::start_old_primary`]). The
    /// time from the stop to the promoted standby taking writes.
    pub fn fail_over(&self) -> Result<Duration> {
        let started = Instant::now();
        self.pg_ctl("primary", "stop")?;
        self.pg_ctl("standby", "promote")?;
        let took = started.elapsed();
        // The old primary becomes a standby of the new one: started by
        // mistake, it serves no writes and follows the new timeline.
        let old = self.dir.join("primary");
        std::fs::write(old.join("standby.signal"), "")?;
        append(
            &old.join("postgresql.auto.conf"),
            &format!(
                "\nprimary_conninfo = 'host=127.0.0.1 port={} user={SUPERUSER}'\n",
                self.standby_port
            ),
        )?;
        if let Some(user) = &self.run_as {
            hand_over(&old, user)?;
        }
        Ok(took)
    }

    /// Starts the old primary again after [`PgStandbyPair::fail_over`], as a
    /// mistaken restart would (blocking).
    pub fn start_old_primary(&self) -> Result<()> {
        self.pg_ctl("primary", "start")
    }

    /// Whether the server on `port` is in recovery (a standby: read-only).
    pub async fn in_recovery(&self, port: u16) -> Result<bool> {
        let url = format!("postgres://{SUPERUSER}@127.0.0.1:{port}/postgres");
        let client = connect(&url).await?;
        Ok(client.query_one("SELECT pg_is_in_recovery()", &[]).await?.get(0))
    }
}
