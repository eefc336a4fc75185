//! The node-loss scenarios of the chaos suite, run against servers the
//! test kit starts for them (never the machine's RabbitMQ or PostgreSQL):
//! a three-node RabbitMQ cluster (`testkit::rabbit_cluster`) that loses
//! the node leading `harvest.jobs` or `deliver.ios` (kill -9), restarts
//! all three nodes one by one, or has one node cut off (the kit's
//! Erlang-level isolate); and a PostgreSQL primary with a synchronous
//! standby (`testkit::pg_failover`) promoted mid-send, the services on a
//! multi-host URL with `target_session_attrs=read-write`. Each of these
//! sends also carries a scheduled send cancelled before the fault: it
//! must still be cancelled, with nothing sent, once its time has passed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clarion_proto::{Names, Platform};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::api::{API_TIMEOUT, TOPIC};
use crate::local_cluster::LocalCluster;
use crate::testkit::pg_standby::PgStandbyPair;
use crate::testkit::rabbit_cluster::RabbitCluster;

/// Nodes of the kit's broker cluster.
const BROKER_NODES: usize = 3;
/// The database of the kit's PostgreSQL pair.
const PAIR_DATABASE: &str = "clarion_chaos";
/// How long after the main send the cancelled one was due.
const CANCELLED_DUE_IN: Duration = Duration::from_secs(15);

/// Which servers a scenario runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Servers {
    /// The machine's PostgreSQL and RabbitMQ (`--database-url`, `--amqp-url`).
    Machine,
    /// The kit's three-node RabbitMQ cluster and the machine's PostgreSQL.
    BrokerCluster,
    /// The kit's PostgreSQL primary and synchronous standby and the
    /// machine's RabbitMQ.
    PostgresPair,
}

/// A fault that takes a server away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NodeFault {
    KillHarvestLeader,
    KillDeliverIosLeader,
    RollingRestart,
    Partition,
    Failover,
}

impl NodeFault {
    pub fn servers(self) -> Servers {
        match self {
            NodeFault::Failover => Servers::PostgresPair,
            _ => Servers::BrokerCluster,
        }
    }

    /// Faults aimed at the harvest strike at the first accepted push,
    /// while shard jobs are still being harvested.
    pub fn at_first_push(self) -> bool {
        matches!(
            self,
            NodeFault::KillHarvestLeader | NodeFault::RollingRestart | NodeFault::Failover
        )
    }
}

/// The servers the kit started for a group of scenarios, and the URLs
/// the suite seeds through and the services are given.
pub(super) struct Kit {
    pub servers: Servers,
    pub rabbit: Option<RabbitCluster>,
    pub pair: Option<Arc<PgStandbyPair>>,
    /// Where the audience is seeded (a single server).
    pub seed_url: String,
    /// `CLARION_DATABASE_URL` of every service.
    pub database_url: String,
    /// `CLARION_AMQP_URL` of every service.
    pub amqp_url: String,
    /// The broker node a fault took down, until it is started again.
    down_node: Option<usize>,
}

impl Kit {
    pub async fn start(servers: Servers, database_url: &str, amqp_url: &str) -> Result<Self> {
        let mut kit = Self {
            servers,
            rabbit: None,
            pair: None,
            seed_url: database_url.to_owned(),
            database_url: database_url.to_owned(),
            amqp_url: amqp_url.to_owned(),
            down_node: None,
        };
        match servers {
            Servers::Machine => {}
            Servers::BrokerCluster => {
                let rabbit = RabbitCluster::start(BROKER_NODES).await?;
                kit.amqp_url = rabbit.amqp_url();
                println!("broker cluster up: {}", rabbit.node_names().join(", "));
                kit.rabbit = Some(rabbit);
            }
            Servers::PostgresPair => {
                let pair = tokio::task::spawn_blocking(PgStandbyPair::start).await??;
                pair.require_synchronous().await?;
                kit.seed_url = pair.primary_url(PAIR_DATABASE);
                kit.database_url = pair.failover_url(PAIR_DATABASE);
                println!(
                    "PostgreSQL primary :{} with synchronous standby :{}",
                    pair.primary_port, pair.standby_port
                );
                kit.pair = Some(Arc::new(pair));
            }
        }
        Ok(kit)
    }

    /// How the servers are described in the report.
    pub fn describe(&self) -> String {
        match self.servers {
            Servers::Machine => "the machine's PostgreSQL and RabbitMQ".into(),
            Servers::BrokerCluster => format!(
                "the test kit's {BROKER_NODES}-node RabbitMQ cluster (quorum queues on every node, \
                 pause_minority), the machine's PostgreSQL"
            ),
            Servers::PostgresPair => "the test kit's PostgreSQL primary and synchronous standby \
                 (services on a multi-host URL, target_session_attrs=read-write), the machine's RabbitMQ"
                .into(),
        }
    }

    fn rabbit(&mut self) -> Result<&mut RabbitCluster> {
        self.rabbit
            .as_mut()
            .context("no broker cluster for this scenario")
    }
}

/// A scheduled send cancelled before a node-loss fault.
pub(super) struct CancelledSend {
    id: String,
    due: Instant,
}

impl CancelledSend {
    /// Schedules a send to the topic `CANCELLED_DUE_IN` from now and
    /// cancels it (its 200 is the acknowledgement that must survive).
    pub async fn schedule(cluster: &LocalCluster, notes: &mut Vec<String>) -> Result<Self> {
        let due_at = chrono::Utc::now() + chrono::Duration::from_std(CANCELLED_DUE_IN)?;
        let id = cluster
            .send(&json!({"topics": [TOPIC], "title": "Chaos", "body": "cancelled", "send_at": due_at.to_rfc3339()}))
            .await?;
        let (code, answer) = cluster.cancel(&id).await?;
        if code != StatusCode::OK {
            anyhow::bail!("the cancel of the scheduled send answered {code}: {answer}");
        }
        notes.push(format!(
            "a send due {} s later was cancelled (200) before the fault",
            CANCELLED_DUE_IN.as_secs()
        ));
        Ok(Self {
            id,
            due: Instant::now() + CANCELLED_DUE_IN,
        })
    }

    /// After its time: the cancelled send's status and what it sent (the
    /// coordinator's count; a push of it would also be a duplicate at the
    /// mocks).
    pub async fn check(&self, cluster: &LocalCluster, failures: &mut Vec<String>) -> Option<u64> {
        let wait = self.due.saturating_duration_since(Instant::now()) + Duration::from_secs(3);
        tokio::time::sleep(wait).await;
        let path = format!("/api/v1/notifications/{}", self.id);
        let status = match tokio::time::timeout(API_TIMEOUT, cluster.get(&path)).await {
            Ok(Ok(status)) => status,
            _ => {
                failures.push("the cancelled send's status could not be read".into());
                return None;
            }
        };
        if status["status"] != "cancelled" {
            failures.push(format!("the cancelled send is {}", status["status"]));
        }
        let sent: u64 = Platform::ALL
            .iter()
            .filter_map(|p| status["delivery"][p.as_str()]["sent"].as_u64())
            .sum();
        if sent > 0 {
            failures.push(format!("{sent} pushes of the acknowledged cancel"));
        }
        Some(sent)
    }
}

impl Kit {
    /// Injects a node-loss fault into the servers of the run in
    /// `namespace`; `accepted` reads the pushes accepted so far. Describes
    /// what was done. A node killed or cut off stays so until
    /// [`Kit::restore`].
    pub async fn inject(
        &mut self,
        fault: NodeFault,
        namespace: &str,
        at: &str,
        accepted: impl Fn() -> u64,
        notes: &mut Vec<String>,
    ) -> Result<String> {
        let names = Names::new(namespace);
        match fault {
            NodeFault::KillHarvestLeader | NodeFault::KillDeliverIosLeader => {
                let queue = if fault == NodeFault::KillHarvestLeader {
                    names.harvest_queue()
                } else {
                    names.deliver_queue(Platform::Ios)
                };
                let rabbit = self.rabbit()?;
                let leader = rabbit.leader_of(&queue).await?;
                let name = rabbit.node_names()[leader].clone();
                rabbit.kill(leader);
                self.down_node = Some(leader);
                Ok(format!(
                    "kill -9 of {name}, the leader of {queue}, {at}; started again after the final status"
                ))
            }
            NodeFault::RollingRestart => {
                let started = Instant::now();
                let rabbit = self.rabbit()?;
                let mut steps = Vec::new();
                for index in 0..BROKER_NODES {
                    let step = Instant::now();
                    rabbit.restart_gracefully(index).await?;
                    steps.push(format!("{:.1} s", step.elapsed().as_secs_f64()));
                }
                notes.push(format!(
                    "each node stopped once no quorum queue needed it, then started: {}; {} pushes accepted when the last was back",
                    steps.join(", "),
                    accepted()
                ));
                Ok(format!(
                    "rolling restart of all {BROKER_NODES} nodes (rabbitmqctl stop, start) {at}, {:.1} s in all",
                    started.elapsed().as_secs_f64()
                ))
            }
            NodeFault::Partition => {
                let queue = names.deliver_queue(Platform::Ios);
                let rabbit = self.rabbit()?;
                let leader = rabbit.leader_of(&queue).await?;
                let name = rabbit.node_names()[leader].clone();
                rabbit.isolate(leader).await?;
                self.down_node = Some(leader);
                Ok(format!(
                    "{name}, the leader of {queue}, cut off from its peers (Erlang distribution refused: pause_minority pauses it) {at}; healed after the final status"
                ))
            }
            NodeFault::Failover => {
                let pair = self
                    .pair
                    .clone()
                    .context("no PostgreSQL pair for this scenario")?;
                let took = tokio::task::spawn_blocking(move || pair.fail_over()).await??;
                Ok(format!(
                    "primary stopped and the synchronous standby promoted {at} ({:.1} s from the stop to writes on the standby); the old primary fenced",
                    took.as_secs_f64()
                ))
            }
        }
    }

    /// Starts again (and so heals) the broker node a fault took down.
    pub async fn restore(&mut self, notes: &mut Vec<String>) -> Result<()> {
        if let Some(index) = self.down_node.take() {
            let started = Instant::now();
            self.rabbit()?.restart(index).await?;
            notes.push(format!(
                "the node was running again {:.1} s after its restart",
                started.elapsed().as_secs_f64()
            ));
        }
        Ok(())
    }

    /// The quorum queues of the run in `namespace`, each on every node:
    /// the figure the report keeps for a broker cluster.
    pub async fn replicated_queues(&self, namespace: &str) -> Option<Value> {
        let rabbit = self.rabbit.as_ref()?;
        Some(match rabbit.check_replicated(&format!("{namespace}.")).await {
            Ok(count) => json!(count),
            Err(err) => json!(format!("{err:#}")),
        })
    }
}

impl Servers {
    /// A short tag for the run's namespace and log directory.
    pub(super) fn tag(self) -> &'static str {
        match self {
            Servers::Machine => "machine",
            Servers::BrokerCluster => "broker-cluster",
            Servers::PostgresPair => "pg-pair",
        }
    }
}
