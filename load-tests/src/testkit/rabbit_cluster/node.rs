//! One node of the test broker cluster: a `rabbitmq-server` from the OS
//! package run as the current user straight from `/usr/lib/rabbitmq/bin`
//! (Debian's `/usr/sbin` wrapper switches to the `rabbitmq` user and drops
//! the environment), with its own name, ports, config, data and logs, bound
//! to 127.0.0.1, light on CPU, in its own process group so a kill takes the
//! whole VM.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::ctl::Cli;
use crate::testkit::scratch::steady_port;

pub(super) const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// One scheduler and no busy-waiting: three Erlang VMs share a small
/// machine with the tests; the distribution listens on loopback only.
const ERL_ARGS: &str =
    "+S 1:1 +sbwt none +sbwtdcpu none +sbwtdio none -kernel inet_dist_use_interface {127,0,0,1}";

pub(super) struct RabbitNode {
    /// `name@localhost`, as the CLI and the queue tables spell it.
    pub name: String,
    /// The AMQP listener.
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Runs so far; run n logs to `server.<n>.log`.
    runs: u32,
}

impl RabbitNode {
    /// Writes the node's files under `cluster_dir/<short>`; not started yet.
    pub fn prepare(cluster_dir: &Path, short: &str, tag: &str) -> Result<Self> {
        let dir = cluster_dir.join(short);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let port = steady_port()?;
        let dist_port = loop {
            let candidate = steady_port()?;
            if candidate != port {
                break candidate;
            }
        };
        std::fs::write(
            dir.join("rabbitmq.conf"),
            format!(
                "listeners.tcp.default = 127.0.0.1:{port}\n\
                 loopback_users = none\n\
                 cluster_partition_handling = pause_minority\n"
            ),
        )?;
        std::fs::write(dir.join("dist_port"), dist_port.to_string())?;
        Ok(Self {
            name: format!("clarion-{tag}-{short}@localhost"),
            port,
            dir,
            child: None,
            runs: 0,
        })
    }

    /// `amqp://` URL of the node.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// Starts the VM (it boots in the background; see [`Cli::await_startup`]).
    pub fn launch(&mut self, cli: &Cli) -> Result<()> {
        self.runs += 1;
        let dist_port = std::fs::read_to_string(self.dir.join("dist_port"))?;
        let out = std::fs::File::create(self.dir.join(format!("server.{}.log", self.runs)))?;
        let child = cli
            .environment(&mut Command::new(SERVER))
            .current_dir(&self.dir)
            .env("RABBITMQ_NODENAME", &self.name)
            .env("RABBITMQ_DIST_PORT", dist_port.trim())
            .env("RABBITMQ_CONFIG_FILE", self.dir.join("rabbitmq.conf"))
            .env("RABBITMQ_MNESIA_BASE", self.dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", self.dir.join("log"))
            .env("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS", ERL_ARGS)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {SERVER} as {}", self.name))?;
        self.child = Some(child);
        Ok(())
    }

    /// True while the VM runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// SIGKILL to the whole VM (kill -9: no goodbye to its peers).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = child.wait();
        }
    }

    /// The last lines of the node's own log, for an error message.
    pub fn broker_log_tail(&self) -> String {
        let short = self.name.split('@').next().unwrap_or_default();
        crate::testkit::scratch::log_tail(&self.dir.join("log").join(format!("{short}@localhost.log")))
    }

    /// The last lines of the current run's output, for an error message.
    pub fn log_tail(&self) -> String {
        crate::testkit::scratch::log_tail(&self.dir.join(format!("server.{}.log", self.runs)))
    }
}

impl Drop for RabbitNode {
    fn drop(&mut self) {
        self.kill();
    }
}
