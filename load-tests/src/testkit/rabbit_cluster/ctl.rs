//! The RabbitMQ command-line tools (`rabbitmqctl`, `rabbitmq-queues`) run
//! against the test cluster with the cluster's Erlang cookie and settings,
//! each call with a deadline; and the queue table they print.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Deserialize;

const TOOLS: &str = "/usr/lib/rabbitmq/bin";

/// How the CLI reaches the cluster: the cookie lives in `home`, and the
/// machine's `rabbitmq-env.conf` (which names the machine's own node) is
/// replaced by an empty one.
pub(super) struct Cli {
    dir: PathBuf,
    calls: std::sync::atomic::AtomicU32,
}

/// One row of `rabbitmqctl list_queues name type leader members`.
#[derive(Debug, Clone, Deserialize)]
pub struct QueueRow {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// The node leading a quorum queue (empty for others).
    #[serde(default)]
    pub leader: String,
    #[serde(default)]
    pub members: Vec<String>,
}

impl Cli {
    /// Writes the cookie, the empty environment file and the empty plugin
    /// list into `dir`.
    pub fn prepare(dir: &Path) -> Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let home = dir.join("home");
        std::fs::create_dir_all(&home)?;
        let cookie = home.join(".erlang.cookie");
        std::fs::write(&cookie, uuid::Uuid::new_v4().simple().to_string().to_uppercase())?;
        std::fs::set_permissions(&cookie, std::fs::Permissions::from_mode(0o400))?;
        std::fs::write(dir.join("rabbitmq-env.conf"), "")?;
        std::fs::write(dir.join("enabled_plugins"), "[].\n")?;
        Ok(Self {
            dir: dir.to_owned(),
            calls: Default::default(),
        })
    }

    /// `command` with the cluster's cookie, environment file and plugins,
    /// and Erlang's port mapper reached on loopback.
    pub fn environment<'a>(&self, command: &'a mut Command) -> &'a mut Command {
        command
            .env("HOME", self.dir.join("home"))
            .env("RABBITMQ_CONF_ENV_FILE", self.dir.join("rabbitmq-env.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", self.dir.join("enabled_plugins"))
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
    }

    /// Runs `tool args` (a tool of `/usr/lib/rabbitmq/bin`), killed after
    /// `timeout`; its standard output when it exits 0.
    pub async fn run(&self, tool: &str, args: &[&str], timeout: Duration) -> Result<String> {
        let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Files, not pipes: a full pipe would stall the tool.
        let out_path = self.dir.join(format!("cli.{call}.out"));
        let err_path = self.dir.join(format!("cli.{call}.err"));
        let mut child = self
            .environment(&mut Command::new(Path::new(TOOLS).join(tool)))
            .args(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path)?)
            .stderr(std::fs::File::create(&err_path)?)
            .spawn()
            .with_context(|| format!("starting {tool}"))?;
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{tool} {} took more than {timeout:?}", args.join(" "));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let out = std::fs::read_to_string(&out_path).unwrap_or_default();
        let err = std::fs::read_to_string(&err_path).unwrap_or_default();
        let _ = std::fs::remove_file(&out_path);
        let _ = std::fs::remove_file(&err_path);
        if !status.success() {
            bail!(
                "{tool} {} failed ({status}): {}{}",
                args.join(" "),
                out.trim(),
                err.trim()
            );
        }
        Ok(out)
    }

    /// `rabbitmqctl -n node args`, with a deadline.
    pub async fn ctl(&self, node: &str, args: &[&str], timeout: Duration) -> Result<String> {
        let mut all = vec!["-n", node];
        all.extend_from_slice(args);
        self.run("rabbitmqctl", &all, timeout).await
    }

    /// The queues of the default virtual host as `node` sees them.
    pub async fn queues(&self, node: &str) -> Result<Vec<QueueRow>> {
        let out = self
            .ctl(
                node,
                &[
                    "-q",
                    "list_queues",
                    "name",
                    "type",
                    "leader",
                    "members",
                    "--formatter",
                    "json",
                ],
                Duration::from_secs(60),
            )
            .await?;
        serde_json::from_str(&out).with_context(|| format!("reading the queue table: {out}"))
    }
}
