//! What the kit's throw-away servers share: a scratch directory, a spare
//! port, the tail of a log for an error message.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// A new empty directory under the system's temporary directory.
pub(crate) fn scratch_dir(prefix: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// A port nothing listens on right now (bound, read, released).
pub(crate) fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Where a server that must listen again after a restart gets its ports:
/// below the kernel's ephemeral range (`ip_local_port_range`, 32768 and
/// up on Linux), which [`free_port`] draws from. A port from that range is
/// also the source port of outgoing connections: an Erlang node that
/// re-dials its peers picks the same source port again and again (the
/// kernel hashes the destination), and a node restarted on such a port met
/// `eaddrinuse` on every boot.
const STEADY_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A port of [`STEADY_PORTS`] that nothing listens on right now; random, so
/// tests running at once seldom try the same one.
pub(crate) fn steady_port() -> Result<u16> {
    for _ in 0..200 {
        let port = rand::random_range(STEADY_PORTS);
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free port in {STEADY_PORTS:?}")
}

/// The last lines of a log file, for an error message.
pub(crate) fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}
