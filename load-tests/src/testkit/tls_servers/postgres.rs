//! A throw-away PostgreSQL cluster (`initdb` + `pg_ctl`) on a spare port of
//! 127.0.0.1 that takes TLS connections only (`ssl = on`, `hostssl` lines,
//! trust authentication), run as the `postgres` user when the tests run as
//! root (PostgreSQL refuses to run as root).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::{TestCa, free_port, log_tail, scratch_dir};
use crate::testkit::pg_server::{append, hand_over, postgres_bin_dir, run_as, server_user};

/// The cluster's superuser.
const SUPERUSER: &str = "postgres";

pub struct TlsPostgres {
    pub port: u16,
    pg_ctl: PathBuf,
    data: PathBuf,
    run_as: Option<String>,
    dir: PathBuf,
}

impl TlsPostgres {
    /// Creates and starts the cluster (blocking: about two seconds).
    pub fn start(ca: &TestCa) -> Result<Self> {
        let bin = postgres_bin_dir()?;
        let run_as = server_user();
        let dir = scratch_dir("clarion-tls-postgres")?;
        let (_, cert, key) = ca.install(&dir)?;
        let data = dir.join("data");
        set_private(&key)?;
        if let Some(user) = &run_as {
            hand_over(&dir, user)?;
        }
        let mut server = Self {
            port: free_port()?,
            pg_ctl: bin.join("pg_ctl"),
            data: data.clone(),
            run_as,
            dir: dir.clone(),
        };
        let initdb = bin.join("initdb");
        let data_arg = data.display().to_string();
        server.run(
            &initdb,
            &["-D", &data_arg, "-A", "trust", "-U", SUPERUSER, "--no-sync"],
        )?;
        let config = format!(
            "\nlisten_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\n\
             ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\nfsync = off\n",
            server.port,
            dir.display(),
            cert.display(),
            key.display()
        );
        append(&data.join("postgresql.conf"), &config)?;
        std::fs::write(
            data.join("pg_hba.conf"),
            "hostssl all all 127.0.0.1/32 trust\nlocal all all trust\n",
        )?;
        let log = dir.join("postgres.log");
        let log_arg = log.display().to_string();
        let pg_ctl = server.pg_ctl.clone();
        if let Err(err) = server.run(
            &pg_ctl,
            &["-D", &data_arg, "-l", &log_arg, "-w", "-t", "60", "start"],
        ) {
            bail!("{err:#}\n{}", log_tail(&log));
        }
        Ok(server)
    }

    /// A URL of the cluster's `postgres` database by `host`, with `sslmode`.
    pub fn url(&self, host: &str, sslmode: &str) -> String {
        format!(
            "postgres://{SUPERUSER}@{host}:{}/postgres?sslmode={sslmode}",
            self.port
        )
    }

    /// Runs `program` with `args`, as the cluster's owner.
    fn run(&mut self, program: &Path, args: &[&str]) -> Result<()> {
        run_as(self.run_as.as_deref(), &self.dir, program, args)
    }
}

impl Drop for TlsPostgres {
    fn drop(&mut self) {
        let pg_ctl = self.pg_ctl.clone();
        let data = self.data.display().to_string();
        let _ = self.run(&pg_ctl, &["-D", &data, "-m", "immediate", "-w", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// PostgreSQL refuses a key file others may read.
fn set_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("making {} private", path.display()))
}
