//! A real RabbitMQ cluster on this machine for the tests of node loss:
//! three nodes of the OS's `rabbitmq-server` with their own names, ports
//! (spare ones, never the machine broker's 5672/25672/15672), data, logs
//! and a cookie of their own, bound to 127.0.0.1, joined into one cluster
//! with `cluster_partition_handling = pause_minority`. Every wait is
//! bounded; the nodes are killed and their directory removed when the
//! value is dropped, even when the test panicked.

mod ctl;
mod node;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use ctl::Cli;
pub use ctl::QueueRow;
use node::{RabbitNode, SERVER};

use super::scratch::scratch_dir;

/// A node boots in about five seconds on an idle machine; three booting at
/// once beside a test run take longer.
const BOOT_PATIENCE: Duration = Duration::from_secs(120);
/// One cluster-changing command (`stop_app`, `join_cluster`, `start_app`).
const CTL_PATIENCE: Duration = Duration::from_secs(90);

pub struct RabbitCluster {
    nodes: Vec<RabbitNode>,
    /// Which nodes were killed and not started again.
    down: Vec<bool>,
    cli: Cli,
    dir: PathBuf,
}

impl RabbitCluster {
    /// Starts `size` nodes, joins them to the first and waits until all
    /// are running members of one cluster.
    pub async fn start(size: usize) -> Result<Self> {
        if !Path::new(SERVER).is_file() {
            bail!(
                "{SERVER} is missing: the broker cluster tests need RabbitMQ (Debian package \
                 `rabbitmq-server`; ./scripts/test installs it)"
            );
        }
        let dir = scratch_dir("clarion-rabbit-cluster")?;
        let cli = Cli::prepare(&dir)?;
        let tag = format!("{}-{:04x}", std::process::id(), rand::random::<u16>());
        let mut nodes = Vec::with_capacity(size);
        for index in 0..size {
            nodes.push(RabbitNode::prepare(&dir, &format!("n{}", index + 1), &tag)?);
        }
        let mut cluster = Self {
            nodes,
            down: vec![false; size],
            cli,
            dir,
        };
        for index in 0..size {
            cluster.nodes[index].launch(&cluster.cli)?;
        }
        for index in 0..size {
            cluster.await_node(index).await?;
        }
        let seed = cluster.nodes[0].name.clone();
        for index in 1..size {
            let node = cluster.nodes[index].name.clone();
            cluster.cli.ctl(&node, &["stop_app"], CTL_PATIENCE).await?;
            cluster
                .cli
                .ctl(&node, &["join_cluster", &seed], CTL_PATIENCE)
                .await?;
            cluster.cli.ctl(&node, &["start_app"], CTL_PATIENCE).await?;
        }
        let count = size.to_string();
        let timeout = BOOT_PATIENCE.as_secs().to_string();
        cluster
            .cli
            .ctl(
                &seed,
                &["await_online_nodes", &count, "--timeout", &timeout],
                BOOT_PATIENCE,
            )
            .await
            .context("the nodes did not form one cluster")?;
        Ok(cluster)
    }

    /// Every node's URL, comma-separated, as `CLARION_AMQP_URL` takes them.
    pub fn amqp_url(&self) -> String {
        self.nodes
            .iter()
            .map(RabbitNode::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The machine's PostgreSQL (as the tests' admin URL says) and this
    /// cluster's nodes, for a test kit `Cluster`.
    pub fn servers(&self) -> crate::testkit::ClusterServers {
        crate::testkit::ClusterServers {
            admin_database_url: std::env::var(clarion_runtime::testing::ADMIN_URL_VAR)
                .unwrap_or_else(|_| clarion_runtime::testing::DEFAULT_ADMIN_URL.to_owned()),
            amqp_url: self.amqp_url(),
            extra_ca_file: None,
        }
    }

    /// The URL of node `index` alone.
    pub fn node_url(&self, index: usize) -> String {
        self.nodes[index].url()
    }

    /// The nodes' names (`name@localhost`), in order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|node| node.name.clone()).collect()
    }

    /// The index of the node called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|node| node.name == name)
    }

    /// kill -9 of node `index`.
    pub fn kill(&mut self, index: usize) {
        self.nodes[index].kill();
        self.down[index] = true;
    }

    /// Starts node `index` again (it rejoins the cluster by itself) and
    /// waits until it runs.
    pub async fn restart(&mut self, index: usize) -> Result<()> {
        self.nodes[index].kill();
        self.nodes[index].launch(&self.cli)?;
        self.await_node(index).await?;
        self.down[index] = false;
        Ok(())
    }

    /// A rolling restart's step for node `index`: waits until stopping it
    /// leaves every quorum queue a majority (its members elsewhere have
    /// caught up: `rabbitmq-diagnostics check_if_node_is_quorum_critical`),
    /// stops it cleanly (`rabbitmqctl stop`), starts it again and waits
    /// until it runs.
    pub async fn restart_gracefully(&mut self, index: usize) -> Result<()> {
        let name = self.nodes[index].name.clone();
        let deadline = Instant::now() + BOOT_PATIENCE;
        loop {
            let check = self
                .cli
                .run(
                    "rabbitmq-diagnostics",
                    &["-n", &name, "check_if_node_is_quorum_critical"],
                    CTL_PATIENCE,
                )
                .await;
            match check {
                Ok(_) => break,
                Err(err) if Instant::now() > deadline => {
                    return Err(err.context(format!("{name} stayed quorum-critical")));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
        self.down[index] = true;
        self.cli.ctl(&name, &["stop"], CTL_PATIENCE).await?;
        self.restart(index).await
    }

    /// Cuts node `index` off from its peers (a network partition without a
    /// packet filter): it refuses Erlang distribution to and from every
    /// node but itself (`net_kernel:allow`) and drops its links, so both
    /// sides see the other down; `pause_minority` pauses it (it closes its
    /// clients' connections) while the other two carry on. It stays cut
    /// off until [`RabbitCluster::restart`] (which heals it).
    pub async fn isolate(&mut self, index: usize) -> Result<()> {
        let name = self.nodes[index].name.clone();
        self.cli
            .ctl(
                &name,
                &[
                    "eval",
                    "Peers = nodes(), ok = net_kernel:allow([node()]), \
                     [erlang:disconnect_node(Peer) || Peer <- Peers], ok.",
                ],
                CTL_PATIENCE,
            )
            .await?;
        self.down[index] = true;
        Ok(())
    }

    /// The queues of the default virtual host, as a running node sees them.
    pub async fn queues(&self) -> Result<Vec<QueueRow>> {
        let mut last = None;
        for (node, down) in self.nodes.iter().zip(&self.down) {
            if *down {
                continue;
            }
            match self.cli.queues(&node.name).await {
                Ok(rows) => return Ok(rows),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no node of the cluster is running")))
    }

    /// The index of the node leading quorum queue `queue`.
    pub async fn leader_of(&self, queue: &str) -> Result<usize> {
        let rows = self.queues().await?;
        let row = rows
            .iter()
            .find(|row| row.name == queue)
            .with_context(|| format!("no queue {queue}"))?;
        self.index_of(&row.leader)
            .with_context(|| format!("{queue} is led by {:?}, no node of this cluster", row.leader))
    }

    /// Checks that every quorum queue whose name starts with `prefix` (at
    /// least one) has every node of the cluster as a member.
    pub async fn check_replicated(&self, prefix: &str) -> Result<usize> {
        let mut names = self.node_names();
        names.sort();
        let rows = self.queues().await?;
        let mut quorum = 0;
        for row in rows
            .iter()
            .filter(|row| row.name.starts_with(prefix) && row.kind == "quorum")
        {
            let mut members = row.members.clone();
            members.sort();
            if members != names {
                bail!("quorum queue {} has members {members:?}, not {names:?}", row.name);
            }
            quorum += 1;
        }
        if quorum == 0 {
            bail!("no quorum queue starts with {prefix}: {rows:?}");
        }
        Ok(quorum)
    }

    /// What a failed test should print: the queue table and the end of
    /// every node's log.
    pub async fn diagnose(&self) -> String {
        let mut text = match self.queues().await {
            Ok(rows) => rows
                .iter()
                .map(|row| {
                    format!(
                        "{} {} leader={} members={:?}\n",
                        row.name, row.kind, row.leader, row.members
                    )
                })
                .collect(),
            Err(err) => format!("no queue table: {err:#}\n"),
        };
        for (node, down) in self.nodes.iter().zip(&self.down) {
            let state = if *down { "down" } else { "up" };
            text.push_str(&format!(
                "--- {} ({state})\n{}\n",
                node.name,
                node.broker_log_tail()
            ));
        }
        text
    }

    /// Waits until node `index` has booted (`await_startup`), or fails with
    /// the end of its log when it exits or takes too long.
    async fn await_node(&mut self, index: usize) -> Result<()> {
        let deadline = Instant::now() + BOOT_PATIENCE;
        let name = self.nodes[index].name.clone();
        loop {
            // Refused at once while the node is not registered yet.
            let answer = self
                .cli
                .ctl(
                    &name,
                    &["await_startup", "--timeout", "30"],
                    Duration::from_secs(45),
                )
                .await;
            if answer.is_ok() {
                return Ok(());
            }
            if !self.nodes[index].is_running() {
                bail!(
                    "RabbitMQ node {name} exited while booting:\n{}",
                    self.nodes[index].log_tail()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "RabbitMQ node {name} did not boot within {BOOT_PATIENCE:?}: {answer:?}\n{}",
                    self.nodes[index].log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Drop for RabbitCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
