//! A throw-away PostgreSQL cluster (`initdb` + `pg_ctl`) on a spare port of
//! 127.0.0.1 that takes TLS connections only (`ssl = on`, `hostssl` lines,
//! trust authentication), run as the `postgres` user when the tests run as
//! root (PostgreSQL refuses to run as root).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::{TestCa, free_port, log_tail, scratch_dir};

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
        let run_as = running_as_root().then(|| "postgres".to_owned());
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
        let mut command = match &self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(program);
                command
            }
            None => Command::new(program),
        };
        let output = command
            .args(args)
            .current_dir(&self.dir)
            .output()
            .with_context(|| format!("running {}", program.display()))?;
        if !output.status.success() {
            bail!(
                "{} {args:?} failed: {}{}",
                program.display(),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
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

/// The newest `/usr/lib/postgresql/<version>/bin` holding `initdb`.
fn postgres_bin_dir() -> Result<PathBuf> {
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, bin)) => Ok(bin),
        None => bail!(
            "no initdb under /usr/lib/postgresql/*/bin: the TLS link tests need the PostgreSQL server \
             binaries (Debian package `postgresql`; ./scripts/test installs it)"
        ),
    }
}

/// True when the tests run as root (`/proc/self` belongs to its user).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

/// Gives `dir` and everything in it to `user`, who runs the server.
fn hand_over(dir: &Path, user: &str) -> Result<()> {
    let status = Command::new("chown")
        .args(["-R", user])
        .arg(dir)
        .status()
        .context("running chown")?;
    if !status.success() {
        bail!("cannot give {} to the user {user}", dir.display());
    }
    Ok(())
}

/// PostgreSQL refuses a key file others may read.
fn set_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("making {} private", path.display()))
}

fn append(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.write_all(text.as_bytes())?;
    Ok(())
}
