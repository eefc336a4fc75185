//! A second, throw-away RabbitMQ node with a TLS listener only, on spare
//! ports of 127.0.0.1, its own node name, data, logs, plugins (none) and
//! Erlang cookie in a temporary directory. Run as the current user straight
//! from `/usr/lib/rabbitmq/bin` (Debian's `/usr/sbin` wrapper switches to
//! the `rabbitmq` user and drops the environment).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::{TestCa, free_port, log_tail, scratch_dir};

const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
/// A node boots in about ten seconds on an idle machine.
const BOOT_PATIENCE: Duration = Duration::from_secs(90);

pub struct TlsRabbitMq {
    /// The TLS listener's port.
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl TlsRabbitMq {
    /// Starts the node and waits until its TLS listener accepts connections.
    pub async fn start(ca: &TestCa) -> Result<Self> {
        if !Path::new(SERVER).is_file() {
            bail!(
                "{SERVER} is missing: the TLS link tests need RabbitMQ (Debian package `rabbitmq-server`; \
                 ./scripts/test installs it)"
            );
        }
        let dir = scratch_dir("clarion-tls-rabbitmq")?;
        let (ca_path, cert, key) = ca.install(&dir)?;
        let port = free_port()?;
        let dist_port = free_port()?;
        let config = dir.join("rabbitmq.conf");
        std::fs::write(
            &config,
            format!(
                "listeners.tcp = none\nlisteners.ssl.default = 127.0.0.1:{port}\n\
                 ssl_options.cacertfile = {}\nssl_options.certfile = {}\nssl_options.keyfile = {}\n\
                 ssl_options.verify = verify_none\nssl_options.fail_if_no_peer_cert = false\n\
                 loopback_users = none\n",
                ca_path.display(),
                cert.display(),
                key.display()
            ),
        )?;
        std::fs::write(dir.join("enabled_plugins"), "[].\n")?;
        std::fs::write(dir.join("rabbitmq-env.conf"), "")?;
        let home = dir.join("home");
        std::fs::create_dir_all(&home)?;
        let log = dir.join("server.log");
        let out = std::fs::File::create(&log)?;
        let child = Command::new(SERVER)
            .current_dir(&dir)
            .env("HOME", &home)
            .env(
                "RABBITMQ_NODENAME",
                format!("clarion-tls-{}-{port}@localhost", std::process::id()),
            )
            .env("RABBITMQ_DIST_PORT", dist_port.to_string())
            .env("RABBITMQ_CONFIG_FILE", &config)
            .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            // Its own process group, so the whole node goes when dropped.
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {SERVER}"))?;
        let mut node = Self { port, child, dir };
        node.wait_for_listener(&log).await?;
        Ok(node)
    }

    /// `amqps://` URL of the node by `host`.
    pub fn url(&self, host: &str) -> String {
        format!("amqps://guest:guest@{host}:{}/%2f", self.port)
    }

    async fn wait_for_listener(&mut self, log: &Path) -> Result<()> {
        let deadline = Instant::now() + BOOT_PATIENCE;
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "the RabbitMQ node exited ({status}) before listening:\n{}",
                    log_tail(log)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "the RabbitMQ node did not listen on {} within {BOOT_PATIENCE:?}:\n{}",
                    self.port,
                    log_tail(log)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for TlsRabbitMq {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
