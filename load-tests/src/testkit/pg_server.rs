//! What the kit's throw-away PostgreSQL servers share: the server binaries
//! of the OS package, and running them as the `postgres` user when the
//! tests run as root (PostgreSQL refuses to run as root).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The newest `/usr/lib/postgresql/<version>/bin` holding `initdb`.
pub(crate) fn postgres_bin_dir() -> Result<PathBuf> {
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
            "no initdb under /usr/lib/postgresql/*/bin: these tests need the PostgreSQL server \
             binaries (Debian package `postgresql`; ./scripts/test installs it)"
        ),
    }
}

/// The user to run the server as: `postgres` when the tests run as root
/// (`/proc/self` belongs to its user), else the current one.
pub(crate) fn server_user() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0);
    root.then(|| "postgres".to_owned())
}

/// Gives `dir` and everything in it to `user`, who runs the server.
pub(crate) fn hand_over(dir: &Path, user: &str) -> Result<()> {
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

/// Runs `program` with `args` in `dir`, as `run_as` when given.
pub(crate) fn run_as(run_as: Option<&str>, dir: &Path, program: &Path, args: &[&str]) -> Result<()> {
    let mut command = match run_as {
        Some(user) => {
            let mut command = Command::new("runuser");
            command.args(["-u", user, "--"]).arg(program);
            command
        }
        None => Command::new(program),
    };
    let output = command
        .args(args)
        .current_dir(dir)
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

/// Appends `text` to the file at `path`.
pub(crate) fn append(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.write_all(text.as_bytes())?;
    Ok(())
}
