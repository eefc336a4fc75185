//! A PostgreSQL primary the kit starts itself (`initdb`, a spare port of
//! 127.0.0.1 — never the machine's server, which every parallel test
//! uses) and a streaming standby made from it with `pg_basebackup -R`
//! (hot standby, `hot_standby_feedback = on`); both stopped (`-m
//! immediate`) and removed when dropped. The log sequence numbers the
//! replica-read rule works with: the primary's current WAL position, and
//! a bounded wait until the standby has replayed a position. Failover
//! (a synchronous standby, promotion, the old primary fenced) is in
//! [`super::pg_failover`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio_postgres::NoTls;

use super::pg_server::{append, hand_over, postgres_bin_dir, run_as, server_user};
use super::scratch::{log_tail, scratch_dir, steady_port};

/// The servers' superuser (trust authentication on loopback).
pub(super) const SUPERUSER: &str = "postgres";

pub struct PgStandbyPair {
    pub primary_port: u16,
    pub standby_port: u16,
    bin: PathBuf,
    pub(super) run_as: Option<String>,
    pub(super) dir: PathBuf,
}

impl PgStandbyPair {
    /// Creates and starts the primary, then copies it into a standby that
    /// streams from it (blocking: a few seconds).
    pub fn start() -> Result<Self> {
        Self::start_delayed(Duration::ZERO)
    }

    /// As [`PgStandbyPair::start`], with a standby that applies each
    /// transaction `apply_delay` after its commit (`recovery_min_apply_delay`):
    /// a replica lagging behind on purpose.
    pub fn start_delayed(apply_delay: Duration) -> Result<Self> {
        let bin = postgres_bin_dir()?;
        let dir = scratch_dir("clarion-pg-standby")?;
        let run_as = server_user();
        if let Some(user) = &run_as {
            hand_over(&dir, user)?;
        }
        let primary_port = steady_port()?;
        let standby_port = loop {
            let port = steady_port()?;
            if port != primary_port {
                break port;
            }
        };
        let pair = Self {
            primary_port,
            standby_port,
            bin,
            run_as,
            dir,
        };
        let primary = pair.data("primary");
        pair.tool(
            "initdb",
            &["-D", &primary, "-A", "trust", "-U", SUPERUSER, "--no-sync"],
        )?;
        append(
            &pair.dir.join("primary/postgresql.conf"),
            &format!(
                "\nlisten_addresses = '127.0.0.1'\nport = {primary_port}\nunix_socket_directories = '{}'\n\
                 wal_level = replica\nmax_wal_senders = 4\nfsync = off\nhot_standby_feedback = on\n",
                pair.dir.display()
            ),
        )?;
        std::fs::write(
            pair.dir.join("primary/pg_hba.conf"),
            "host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\nlocal all all trust\n",
        )?;
        if let Some(user) = &pair.run_as {
            hand_over(&pair.dir.join("primary"), user)?;
        }
        pair.pg_ctl("primary", "start")?;
        let standby = pair.data("standby");
        let port = primary_port.to_string();
        pair.tool(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                SUPERUSER,
                "-D",
                &standby,
                "-R",
                "-X",
                "stream",
                "--checkpoint=fast",
                "--no-sync",
            ],
        )?;
        // The copied configuration names the primary's port; a later line wins.
        append(
            &pair.dir.join("standby/postgresql.conf"),
            &format!(
                "\nport = {standby_port}\nrecovery_min_apply_delay = '{}ms'\n",
                apply_delay.as_millis()
            ),
        )?;
        pair.pg_ctl("standby", "start")?;
        Ok(pair)
    }

    /// URL of database `database` on the primary.
    pub fn primary_url(&self, database: &str) -> String {
        format!(
            "postgres://{SUPERUSER}@127.0.0.1:{}/{database}",
            self.primary_port
        )
    }

    /// URL of database `database` on the standby (read-only).
    pub fn standby_url(&self, database: &str) -> String {
        format!(
            "postgres://{SUPERUSER}@127.0.0.1:{}/{database}",
            self.standby_port
        )
    }

    /// The primary's current WAL position (`pg_current_wal_lsn()`), as text.
    pub async fn primary_lsn(&self) -> Result<String> {
        let client = connect(&self.primary_url("postgres")).await?;
        let row = client.query_one("SELECT pg_current_wal_lsn()::text", &[]).await?;
        Ok(row.get(0))
    }

    /// Waits until the standby has replayed `lsn`; the time it took, or an
    /// error after `patience`.
    pub async fn wait_replayed(&self, lsn: &str, patience: Duration) -> Result<Duration> {
        let started = Instant::now();
        let client = connect(&self.standby_url("postgres")).await?;
        loop {
            let row = client
                .query_one("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", &[&lsn])
                .await?;
            if row.get::<_, Option<bool>>(0) == Some(true) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > patience {
                bail!("the standby did not replay {lsn} within {patience:?}");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The path of data directory `name`, as text.
    fn data(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// `pg_ctl -D <name> <action>`, waiting at most a minute.
    pub(super) fn pg_ctl(&self, name: &str, action: &str) -> Result<()> {
        let log = self.dir.join(format!("{name}.log"));
        let log_arg = log.display().to_string();
        let data = self.data(name);
        self.tool("pg_ctl", &["-D", &data, "-l", &log_arg, "-w", "-t", "60", action])
            .map_err(|err| anyhow::anyhow!("{err:#}\n{}", log_tail(&log)))
    }

    /// Runs a PostgreSQL program as the servers' owner.
    fn tool(&self, program: &str, args: &[&str]) -> Result<()> {
        run_as(self.run_as.as_deref(), &self.dir, &self.bin.join(program), args)
    }
}

impl Drop for PgStandbyPair {
    fn drop(&mut self) {
        for name in ["standby", "primary"] {
            if Path::new(&self.data(name)).is_dir() {
                let data = self.data(name);
                let _ = self.tool("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A session on `url`, its connection driven in the background.
pub(super) async fn connect(url: &str) -> Result<tokio_postgres::Client> {
    let (client, connection) =
        tokio::time::timeout(Duration::from_secs(10), tokio_postgres::connect(url, NoTls))
            .await
            .context("connecting took more than 10 s")?
            .with_context(|| format!("connecting to {url}"))?;
    tokio::spawn(connection);
    Ok(client)
}
