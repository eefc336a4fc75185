//! The chaos suite: faults injected into a whole cluster of release
//! processes in the middle of a send, and what became of the send.
//!
//! One audience is seeded into its own database, the mocks and a local
//! cluster are started once, and each scenario then resets the mocks'
//! accounting, sends one notification, waits until a share of the pushes
//! was accepted (read from the mocks' counters, not a fixed sleep),
//! injects its fault, recovers (restarts the process, brings the service
//! or the mock back), and waits, with a deadline, for the notification's
//! final status. Each scenario records the delivered share of the
//! reachable audience, duplicate pushes, time to the final status, that
//! status, panics in the services' logs, the bound it must meet and
//! whether it did. Scenarios that restart RabbitMQ or PostgreSQL follow
//! the shared-services protocol: they wait while `/tmp/clarion-tests-running`
//! exists and hold `/tmp/clarion-chaos-restarting` while the service is down.
//! The node-loss scenarios (`nodes`) run against servers the test kit
//! starts for them: scenarios are grouped by the servers they need, and
//! each group gets its own audience, mocks and cluster of processes.
//! With `--keep-others` the report keeps the scenarios of the previous
//! report that were not run again (`merge`), each with its own commit,
//! CPU model, date and audience.

mod api;
mod merge;
mod nodes;
mod stall;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clarion_proto::Platform;
use reqwest::StatusCode;
use serde::Serialize;
use serde_json::{Value, json};

use super::run::{Machine, machine};
use super::{git_commit, write_json};
use crate::audience::{AudienceShape, Layout};
use crate::blackhole::BlackHoleProxy;
use crate::local_cluster::{Env, LocalCluster, LocalClusterConfig, Member, delete_namespace};
use crate::mocks::{
    ApnsMock, ApnsMockConfig, FaultConfig, FcmMock, FcmMockConfig, OnOwnThread, start_on_own_thread,
};
use crate::process::free_port;
use crate::seed::{SeedPlan, connect, recreate_database, seed};
use api::{API_TIMEOUT, TOPIC};
use nodes::{CancelledSend, Kit, NodeFault, Servers};
use stall::StallWatch;

/// The test suite holds PostgreSQL and RabbitMQ while this file exists.
const TESTS_RUNNING: &str = "/tmp/clarion-tests-running";
/// Held while this suite has a shared service down.
const CHAOS_RESTARTING: &str = "/tmp/clarion-chaos-restarting";
/// How often the mocks' counters are read while waiting for the fault's moment.
const TRIGGER_POLL: Duration = Duration::from_millis(2);
/// How often the notification's status is read.
const STATUS_POLL: Duration = Duration::from_millis(200);
/// Waited after the final status before the mocks' counts are read, so a
/// duplicate pushed after completion is still counted.
const SETTLE: Duration = Duration::from_secs(2);
/// Between scenarios: how long the mocks must receive nothing, at most
/// how long that is waited for.
const QUIET_FOR: Duration = Duration::from_secs(3);
const QUIET_WITHIN: Duration = Duration::from_secs(120);
/// Longest a `rabbitmqctl` or `pg_ctlcluster` command may take.
const COMMAND_LIMIT_SECS: u64 = 120;
/// Longest PostgreSQL may take to accept connections after its restart.
const SERVICE_BACK_WITHIN: Duration = Duration::from_secs(120);
/// Pushes are paced by the dispatchers' settings below: pushes of one batch
/// in flight.
const STREAMS_PER_BATCH: u64 = 20;
/// Batches each dispatcher delivers at once (its own setting, not the
/// default, so a send lasts as long as it did in the runs before).
const BATCH_WORKERS: u64 = 4;
/// Tokens per token batch (the harvester's `CLARION_BATCH_SIZE`).
const BATCH_SIZE: u64 = 250;
/// Token batches of one harvest worker awaiting their confirm.
const PUBLISH_WINDOW: u64 = 4;
/// Tokens per shard job, so a send is cut into several jobs.
const TOKENS_PER_JOB: u64 = 1000;
/// The watchdog's stall limit: short enough to fail a stuck notification
/// within a scenario's deadline, longer than any fault here holds a send.
const STALL_SECS: u64 = 180;

#[derive(Debug, Clone, clap::Args)]
pub struct ChaosArgs {
    /// Devices in the audience (half iOS, half Android, all on breaking/uk).
    #[arg(long, default_value_t = 20_000)]
    pub devices: u64,
    /// The suite's database: dropped and created again at the start.
    #[arg(
        long,
        env = "CLARION_CHAOS_DATABASE_URL",
        default_value = "postgres://clarion:clarion@127.0.0.1:5432/clarion_chaos"
    )]
    pub database_url: String,
    /// RabbitMQ the cluster uses.
    #[arg(
        long,
        env = "CLARION_AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub amqp_url: String,
    /// A scenario to run (repeatable; default: every one, in this order).
    #[arg(long = "scenario", value_enum)]
    pub scenarios: Vec<Scenario>,
    /// Latency of every mock answer, so a send lasts long enough to be
    /// interrupted (with 20 pushes of a batch in flight, 4 batches per
    /// dispatcher: about 2,000 pushes/s per platform at 40 ms).
    #[arg(long, default_value_t = 40.0)]
    pub mock_latency_ms: f64,
    /// The fault is injected once this share of the audience was accepted
    /// (harvester faults: at the first accepted push, while the harvest may
    /// still run).
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u8).range(1..=90))]
    pub fault_at_percent: u8,
    /// How long the 5xx and 429 storms last.
    #[arg(long, default_value_t = 10)]
    pub storm_secs: u64,
    /// `Retry-After` of the 429 storm (the dispatcher caps what it honours).
    #[arg(long, default_value_t = 86_400)]
    pub storm_retry_after_secs: u64,
    /// How long RabbitMQ stays stopped (`stop_app` … `start_app`).
    #[arg(long, default_value_t = 5)]
    pub broker_outage_secs: u64,
    /// How long the OAuth2 token endpoint hangs (the dispatcher gives up a
    /// token fetch after 10 s).
    #[arg(long, default_value_t = 25)]
    pub oauth_hang_secs: u64,
    /// PostgreSQL cluster restarted by `pg_ctlcluster`, as `VERSION/NAME`.
    #[arg(long, default_value = "15/main")]
    pub postgres_cluster: String,
    /// A scenario fails when its notification has no final status this
    /// long after the send.
    #[arg(long, default_value_t = 300)]
    pub scenario_timeout_secs: u64,
    /// Longest wait for the test suite to release the shared services
    /// before a restart scenario is skipped.
    #[arg(long, default_value_t = 900)]
    pub lock_wait_secs: u64,
    /// Extra `KEY=VALUE` settings for every Clarion process (repeatable).
    #[arg(long = "set", value_parser = super::run::parse_setting)]
    pub settings: Vec<(String, String)>,
    /// Keep the scenarios of the report already at `--out` that this run
    /// does not run again (each says its own commit, machine and date).
    #[arg(long)]
    pub keep_others: bool,
    /// Where the JSON report is written (default `--out-dir`/chaos.json).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Directory of the report (`chaos.json`) when `--out` is not given.
    #[arg(long, default_value_os_t = super::default_results_dir())]
    pub out_dir: PathBuf,
}

/// The scenarios, in the order they run by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// No fault: the reference.
    Baseline,
    /// SIGKILL of the coordinator mid-send, then restarted.
    Kill9Coordinator,
    /// SIGKILL of the harvester at the first accepted push, then restarted.
    Kill9Harvester,
    /// SIGKILL of the iOS dispatcher mid-send, then restarted.
    Kill9DispatcherIos,
    /// SIGKILL of the Android dispatcher mid-send, then restarted.
    Kill9DispatcherAndroid,
    /// SIGTERM of the coordinator mid-send, then restarted.
    SigtermCoordinator,
    /// SIGTERM of the harvester at the first accepted push, then restarted.
    SigtermHarvester,
    /// SIGTERM of the iOS dispatcher mid-send, then restarted.
    SigtermDispatcherIos,
    /// SIGTERM of the Android dispatcher mid-send, then restarted.
    SigtermDispatcherAndroid,
    /// Harvester and dispatchers stopped, send, cancel, workers started.
    CancelWorkersDown,
    /// `rabbitmqctl stop_app` mid-send, `start_app` after the outage.
    BrokerRestart,
    /// `pg_ctlcluster … restart` mid-send.
    PostgresRestart,
    /// Every push answered 500 or 503 for `--storm-secs`.
    Storm5xx,
    /// Every FCM push answered 429 with a huge `Retry-After` for `--storm-secs`.
    Storm429,
    /// The OAuth2 token endpoint hangs and the access tokens expire.
    OauthHang,
    /// The iOS dispatcher's connections to APNs go silent (no FIN, no RST).
    BlackHole,
    /// Kit's 3-node RabbitMQ cluster: kill -9 of the node leading
    /// `harvest.jobs` at the first accepted push.
    RabbitKillHarvestLeader,
    /// Kit's 3-node RabbitMQ cluster: kill -9 of the node leading
    /// `deliver.ios` mid-send.
    RabbitKillDeliverIosLeader,
    /// Kit's 3-node RabbitMQ cluster: every node stopped and started, one
    /// after the other, from the first accepted push.
    RabbitRollingRestart,
    /// Kit's 3-node RabbitMQ cluster: the node leading `deliver.ios` cut
    /// off from the other two mid-send.
    RabbitPartition,
    /// Kit's PostgreSQL pair: the primary stopped and the synchronous
    /// standby promoted at the first accepted push.
    PostgresFailover,
}

impl Scenario {
    const ALL: [Scenario; 21] = [
        Scenario::Baseline,
        Scenario::Kill9Coordinator,
        Scenario::Kill9Harvester,
        Scenario::Kill9DispatcherIos,
        Scenario::Kill9DispatcherAndroid,
        Scenario::SigtermCoordinator,
        Scenario::SigtermHarvester,
        Scenario::SigtermDispatcherIos,
        Scenario::SigtermDispatcherAndroid,
        Scenario::CancelWorkersDown,
        Scenario::BrokerRestart,
        Scenario::PostgresRestart,
        Scenario::Storm5xx,
        Scenario::Storm429,
        Scenario::OauthHang,
        Scenario::BlackHole,
        Scenario::RabbitKillHarvestLeader,
        Scenario::RabbitKillDeliverIosLeader,
        Scenario::RabbitRollingRestart,
        Scenario::RabbitPartition,
        Scenario::PostgresFailover,
    ];

    fn name(self) -> String {
        clap::ValueEnum::to_possible_value(&self)
            .map_or_else(|| format!("{self:?}"), |value| value.get_name().to_owned())
    }

    /// The service this scenario kills or stops, if any.
    fn target(self) -> Option<Target> {
        use Scenario::*;
        match self {
            Kill9Coordinator | SigtermCoordinator => Some(Target::Coordinator),
            Kill9Harvester | SigtermHarvester => Some(Target::Harvester),
            Kill9DispatcherIos | SigtermDispatcherIos => Some(Target::Dispatcher(Platform::Ios)),
            Kill9DispatcherAndroid | SigtermDispatcherAndroid => Some(Target::Dispatcher(Platform::Android)),
            _ => None,
        }
    }

    /// The server this scenario takes away, if any.
    fn node_fault(self) -> Option<NodeFault> {
        use Scenario::*;
        match self {
            RabbitKillHarvestLeader => Some(NodeFault::KillHarvestLeader),
            RabbitKillDeliverIosLeader => Some(NodeFault::KillDeliverIosLeader),
            RabbitRollingRestart => Some(NodeFault::RollingRestart),
            RabbitPartition => Some(NodeFault::Partition),
            PostgresFailover => Some(NodeFault::Failover),
            _ => None,
        }
    }

    fn servers(self) -> Servers {
        self.node_fault().map_or(Servers::Machine, NodeFault::servers)
    }

    fn is_node_loss(self) -> bool {
        self.node_fault().is_some()
    }

    fn is_kill(self) -> bool {
        use Scenario::*;
        matches!(
            self,
            Kill9Coordinator | Kill9Harvester | Kill9DispatcherIos | Kill9DispatcherAndroid
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Coordinator,
    Harvester,
    Dispatcher(Platform),
}

/// What one scenario did to its notification.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    pub scenario: String,
    /// Which run produced this scenario, on which servers.
    #[serde(flatten)]
    pub run: RunOf,
    /// What was done, and when.
    pub fault: String,
    /// Devices the coordinator harvested for the notification.
    pub audience: u64,
    /// Devices the providers could reach (the seeded audience; no dead tokens).
    pub reachable: u64,
    /// Distinct tokens the mocks accepted.
    pub delivered: u64,
    pub delivered_percent: f64,
    /// Accepted pushes beyond the first for their token.
    pub duplicate_pushes: u64,
    /// The most duplicates the scenario may cause.
    pub duplicate_bound: u64,
    /// Pushes accepted after the cancel was acknowledged (cancel only).
    pub pushes_after_cancel: Option<u64>,
    /// Pushes the mocks had accepted when the fault was injected.
    pub accepted_at_fault: Option<u64>,
    /// Seconds from the send request to the final status.
    pub time_to_final_status_s: Option<f64>,
    /// Seconds from the fault to the final status: the time to recover.
    pub fault_to_final_status_s: Option<f64>,
    /// The longest time the mocks accepted no push between the fault and
    /// the final status.
    pub longest_stall_s: Option<f64>,
    pub final_status: String,
    /// `panicked` lines the services logged during the scenario.
    pub panics: u64,
    /// The conditions the scenario must meet.
    pub bound: String,
    pub passed: bool,
    /// Which conditions were not met.
    pub failures: Vec<String>,
    /// What else was seen (exit statuses, jobs at the fault, the status).
    pub notes: Vec<String>,
    /// The mocks' answers by HTTP status over the scenario.
    pub answers_by_status: BTreeMap<u16, u64>,
}

/// The run a scenario comes from: a report may hold several (`merge`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunOf {
    /// The servers the send ran against.
    pub servers: String,
    /// Devices of the audience.
    pub devices: u64,
    pub git_commit: Option<String>,
    pub cpu_model: String,
    /// When the run started.
    pub run_at: String,
}

#[derive(Debug, Serialize)]
pub struct ChaosReport {
    pub name: String,
    pub devices: u64,
    pub passed: usize,
    pub failed: usize,
    pub scenarios: Vec<ScenarioResult>,
    pub machine: Machine,
    pub configuration: Value,
    pub git_commit: Option<String>,
    pub started_at: String,
    pub took_s: f64,
}

/// The bounds the settings of the run give.
#[derive(Debug, Clone, Copy, Serialize)]
struct Bounds {
    /// Harvester kill: batches awaiting their confirm, in tokens.
    harvester_in_flight: u64,
    /// Dispatcher kill: batches in hand, in tokens.
    dispatcher_in_hand: u64,
    /// Black hole: pushes of the iOS dispatcher in flight.
    pushes_in_flight: u64,
    /// A lost broker node or database server: what the harvester has
    /// unconfirmed plus what both dispatchers hold, in tokens.
    node_in_flight: u64,
}

/// Everything a scenario works with.
struct Chaos {
    args: ChaosArgs,
    cluster: LocalCluster,
    apns: OnOwnThread<ApnsMock>,
    fcm: OnOwnThread<FcmMock>,
    /// Between the iOS dispatcher and the APNs mock.
    apns_proxy: BlackHoleProxy,
    /// Between the Android dispatcher and the OAuth2 token endpoint.
    token_proxy: BlackHoleProxy,
    bounds: Bounds,
    base_faults: FaultConfig,
    /// The servers of this group of scenarios.
    kit: Kit,
    /// The run's AMQP namespace.
    namespace: String,
    /// The mocks' files.
    work: PathBuf,
    /// The settings, for the report.
    configuration: Value,
}

pub async fn run(args: ChaosArgs) -> Result<ChaosReport> {
    let started = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339();
    let scenarios = if args.scenarios.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        args.scenarios.clone()
    };
    let machine = machine();
    let commit = git_commit();
    // One group per kind of servers, in the order of their first scenario.
    let mut groups: Vec<(Servers, Vec<Scenario>)> = Vec::new();
    for scenario in scenarios {
        match groups
            .iter_mut()
            .find(|(servers, _)| *servers == scenario.servers())
        {
            Some((_, group)) => group.push(scenario),
            None => groups.push((scenario.servers(), vec![scenario])),
        }
    }
    let mut results = Vec::new();
    let mut configuration = Value::Null;
    let mut servers_used = Vec::new();
    for (servers, group) in groups {
        let kit = Kit::start(servers, &args.database_url, &args.amqp_url).await?;
        let described = kit.describe();
        let mut chaos = Chaos::start(&args, kit).await?;
        if let Some(replicated) = chaos.kit.replicated_queues(&chaos.namespace).await {
            println!("quorum queues on every node: {replicated}");
            servers_used.push(json!({"servers": described, "quorum_queues_on_every_node": replicated}));
        } else {
            servers_used.push(json!({"servers": described}));
        }
        for scenario in group {
            println!("scenario {}", scenario.name());
            let mut result = match chaos.scenario(scenario).await {
                Ok(result) => result,
                Err(err) => chaos.errored(scenario, &err),
            };
            result.run = RunOf {
                servers: described.clone(),
                devices: args.devices,
                git_commit: commit.clone(),
                cpu_model: machine.cpu_model.clone(),
                run_at: started_at.clone(),
            };
            print_result(&result);
            let failed = !result.passed;
            if failed {
                result
                    .notes
                    .push("every worker was restarted after this failure, so it does not carry over".into());
            }
            results.push(result);
            chaos.heal(failed).await;
        }
        configuration = chaos.configuration.clone();
        chaos.stop().await;
    }
    configuration["servers"] = json!(servers_used);

    let passed = results.iter().filter(|r| r.passed).count();
    let report = ChaosReport {
        name: "chaos".into(),
        devices: args.devices,
        passed,
        failed: results.len() - passed,
        scenarios: results,
        machine,
        configuration,
        git_commit: commit,
        started_at,
        took_s: started.elapsed().as_secs_f64(),
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| args.out_dir.join("chaos.json"));
    if args.keep_others && out.is_file() {
        let previous: Value = serde_json::from_str(&std::fs::read_to_string(&out)?)
            .with_context(|| format!("reading {}", out.display()))?;
        write_json(
            &out,
            &merge::keep_others(previous, serde_json::to_value(&report)?),
        )?;
    } else {
        write_json(&out, &report)?;
    }
    println!();
    print!("{}", markdown_table(&report.scenarios));
    println!(
        "\n{} of {} scenarios passed; report in {}",
        report.passed,
        report.scenarios.len(),
        out.display()
    );
    Ok(report)
}

fn print_result(result: &ScenarioResult) {
    println!(
        "  {}: delivered {}/{}, {} duplicates (bound {}), final {} after {}, {} panics{}",
        if result.passed { "passed" } else { "FAILED" },
        result.delivered,
        result.reachable,
        result.duplicate_pushes,
        result.duplicate_bound,
        result.final_status,
        seconds(result.time_to_final_status_s),
        result.panics,
        if result.failures.is_empty() {
            String::new()
        } else {
            format!(" — {}", result.failures.join("; "))
        }
    );
}

impl Chaos {
    /// Seeds the audience on the kit's servers, starts the mocks and the
    /// cluster of release processes.
    async fn start(args: &ChaosArgs, kit: Kit) -> Result<Self> {
        recreate_database(&kit.seed_url).await?;
        let client = connect(&kit.seed_url).await?;
        let plan = SeedPlan {
            devices: args.devices,
            shape: AudienceShape {
                web_percent: 0,
                ios_percent: 50,
                dead_percent: 0,
                layout: Layout::Single,
                locales: 0,
            },
            fresh: true,
            apps: 1,
            receipts: false,
        };
        let seeded = seed(&client, &plan, false).await?;
        drop(client);
        println!(
            "seeded {} devices in {:.1} s",
            seeded.devices,
            seeded.elapsed.as_secs_f64()
        );
        let work = std::env::temp_dir().join(format!(
            "clarion-chaos-{}-{}",
            std::process::id(),
            kit.servers.tag()
        ));
        std::fs::create_dir_all(&work)?;
        let apns_config = ApnsMockConfig::local(work.clone());
        let apns = start_on_own_thread("mock-apns", || ApnsMock::start(apns_config)).await?;
        let apns_proxy = BlackHoleProxy::start(socket_addr(&apns.endpoint)?).await?;
        // The OAuth2 token endpoint is reached through a proxy too: the
        // service account's token URI (and so the assertions' audience) names
        // the proxy, which forwards to the mock's own port.
        let token_addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let token_proxy = BlackHoleProxy::start(token_addr).await?;
        let fcm_config = FcmMockConfig {
            token_addr,
            public_token_addr: Some(token_proxy.addr),
            ..FcmMockConfig::local(work.clone())
        };
        let fcm = start_on_own_thread("mock-fcm", || FcmMock::start(fcm_config)).await?;
        // What the mocks keep is for tests to read; here it would only cost.
        for mock in [&apns.state, &fcm.state] {
            mock.set_keeping(false);
        }

        let ca_file = work.join("extra-ca.pem");
        std::fs::write(
            &ca_file,
            std::fs::read_to_string(&apns.ca_file)? + &std::fs::read_to_string(&fcm.ca_file)?,
        )?;

        let proxied_apns = format!("https://{}", apns_proxy.addr);
        let mut dispatcher_env: Env = apns
            .env()
            .into_iter()
            .map(|(key, value)| {
                let value = if key == "CLARION_APNS_ENDPOINT" {
                    proxied_apns.clone()
                } else {
                    value
                };
                (key, value)
            })
            .collect();
        dispatcher_env.push(("CLARION_APNS_SANDBOX_ENDPOINT".into(), proxied_apns.clone()));
        dispatcher_env.extend(fcm.env());
        dispatcher_env.push(("CLARION_EXTRA_CA_FILE".into(), ca_file.display().to_string()));
        // The mock FCM has no quota: nothing to share out.
        dispatcher_env.push(("CLARION_FCM_QUOTA_PER_MINUTE".into(), "0".into()));
        // The dispatchers' own settings of this benchmark (recorded in the
        // report's configuration as they are given).
        let dispatcher_pins: Env = vec![
            (
                "CLARION_DISPATCH_STREAMS_PER_BATCH".into(),
                STREAMS_PER_BATCH.to_string(),
            ),
            ("CLARION_DISPATCH_BATCH_WORKERS".into(), BATCH_WORKERS.to_string()),
        ];
        dispatcher_env.extend(dispatcher_pins.iter().cloned());
        dispatcher_env.extend(args.settings.iter().cloned());
        let mut coordinator_env: Env = vec![
            ("CLARION_TOKENS_PER_JOB".into(), TOKENS_PER_JOB.to_string()),
            ("CLARION_STALL_SECS".into(), STALL_SECS.to_string()),
        ];
        coordinator_env.extend(args.settings.iter().cloned());
        let mut harvester_env: Env = vec![
            ("CLARION_BATCH_SIZE".into(), BATCH_SIZE.to_string()),
            (
                "CLARION_HARVEST_PUBLISH_WINDOW".into(),
                PUBLISH_WINDOW.to_string(),
            ),
        ];
        harvester_env.extend(args.settings.iter().cloned());
        let harvester_in_flight = setting(&harvester_env, "CLARION_HARVEST_WORKERS", 4)
            * setting(&harvester_env, "CLARION_HARVEST_PUBLISH_WINDOW", PUBLISH_WINDOW)
            * setting(&harvester_env, "CLARION_BATCH_SIZE", BATCH_SIZE);
        let dispatcher_in_hand = setting(&dispatcher_env, "CLARION_DISPATCH_BATCH_WORKERS", BATCH_WORKERS)
            * setting(&dispatcher_env, "CLARION_DISPATCH_PREFETCH", 1)
            * setting(&harvester_env, "CLARION_BATCH_SIZE", BATCH_SIZE);
        let bounds = Bounds {
            harvester_in_flight,
            dispatcher_in_hand,
            node_in_flight: harvester_in_flight + 2 * dispatcher_in_hand,
            pushes_in_flight: setting(&dispatcher_env, "CLARION_DISPATCH_BATCH_WORKERS", BATCH_WORKERS)
                * setting(
                    &dispatcher_env,
                    "CLARION_DISPATCH_STREAMS_PER_BATCH",
                    STREAMS_PER_BATCH,
                ),
        };

        let namespace = format!("chaos-{}-{}", std::process::id(), kit.servers.tag());
        let log_dir = std::env::current_exe()?
            .parent()
            .context("the executable has no directory")?
            .join(format!("chaos-logs-{}", kit.servers.tag()));
        let _ = std::fs::remove_dir_all(&log_dir);
        let config = LocalClusterConfig {
            database_url: kit.database_url.clone(),
            amqp_url: kit.amqp_url.clone(),
            namespace: namespace.clone(),
            harvesters: 1,
            coordinator_env: coordinator_env.clone(),
            harvester_env: harvester_env.clone(),
            // No dispatcher at the start: the audience has no browsers, and
            // a web dispatcher without VAPID credentials refuses to start.
            dispatcher_env: Env::new(),
            log_dir: log_dir.clone(),
        };
        let mut cluster = crate::bench::start_cluster(&config).await?;
        cluster.set_dispatcher_env(dispatcher_env);
        for platform in [Platform::Ios, Platform::Android] {
            cluster.start_dispatcher(platform).await?;
        }
        println!("cluster up; logs in {}", log_dir.display());
        let base_faults = FaultConfig {
            latency_ms: args.mock_latency_ms,
            ..FaultConfig::default()
        };
        let configuration = json!({
            "devices": args.devices,
            "ios_percent": 50,
            "harvesters": 1,
            "dispatchers_per_platform": 1,
            "mock_latency_ms": args.mock_latency_ms,
            "fault_at_percent": args.fault_at_percent,
            "storm_secs": args.storm_secs,
            "storm_retry_after_secs": args.storm_retry_after_secs,
            "broker_outage_secs": args.broker_outage_secs,
            "oauth_hang_secs": args.oauth_hang_secs,
            "coordinator": env_strings(&coordinator_env),
            "harvester": env_strings(&harvester_env),
            "dispatcher": env_strings(&dispatcher_pins),
            "settings": env_strings(&args.settings),
            "bounds": bounds,
        });
        let chaos = Chaos {
            args: args.clone(),
            cluster,
            apns,
            fcm,
            apns_proxy,
            token_proxy,
            bounds,
            base_faults,
            kit,
            namespace,
            work,
            configuration,
        };
        // Warm the topic count, so the send is planned from the real size.
        let size = chaos.cluster.get(&format!("/api/v1/topics/{TOPIC}")).await?;
        println!("topic {TOPIC}: {} subscribers", size["subscribers"]);
        Ok(chaos)
    }

    /// Stops the processes, removes the run's namespace (on the machine's
    /// broker; a kit's cluster goes with it) and the mocks' files.
    async fn stop(mut self) {
        self.cluster.stop();
        if self.kit.rabbit.is_none() {
            delete_namespace(&self.kit.amqp_url, &self.namespace).await;
        }
        let _ = std::fs::remove_dir_all(&self.work);
    }

    async fn scenario(&mut self, scenario: Scenario) -> Result<ScenarioResult> {
        if scenario == Scenario::CancelWorkersDown {
            return self.cancel_with_workers_down().await;
        }
        let timeout = Duration::from_secs(self.args.scenario_timeout_secs);
        self.reset_mocks();
        let panics_before = count_panics(self.cluster.log_dir());
        let mut notes = Vec::new();
        let mut failures = Vec::new();
        // A restart of a shared service waits for the test suite first.
        let lock = match scenario {
            Scenario::BrokerRestart | Scenario::PostgresRestart => {
                Some(RestartLock::acquire(Duration::from_secs(self.args.lock_wait_secs)).await?)
            }
            _ => None,
        };

        // Before a node-loss fault, an acknowledged cancel that must survive it.
        let cancelled = if scenario.is_node_loss() {
            Some(CancelledSend::schedule(&self.cluster, &mut notes).await?)
        } else {
            None
        };
        let sent = Instant::now();
        let id = self
            .cluster
            .send(&json!({"topics": [TOPIC], "title": "Chaos", "body": scenario.name()}))
            .await?;
        let devices = self.args.devices;
        let at_first_push = scenario.node_fault().is_some_and(NodeFault::at_first_push);
        let threshold = if scenario.target() == Some(Target::Harvester) || at_first_push {
            1
        } else {
            (devices * u64::from(self.args.fault_at_percent)).div_ceil(100)
        };
        let accepted_at_fault = if scenario == Scenario::Baseline {
            None
        } else {
            let at = self.wait_for_accepted(threshold, sent + timeout).await?;
            if at >= devices {
                notes.push("the send had finished before the fault".into());
            }
            Some(at)
        };
        let stalls = StallWatch::start([self.apns.state.clone(), self.fcm.state.clone()]);
        let fault_at = Instant::now();
        let fault = if let Some(fault) = scenario.node_fault() {
            let at = format!("at {} accepted pushes", self.accepted());
            let mocks = [self.apns.state.clone(), self.fcm.state.clone()];
            let accepted = move || -> u64 { mocks.iter().map(|m| m.accounting.counters().accepted).sum() };
            self.kit
                .inject(fault, &self.namespace, &at, accepted, &mut notes)
                .await?
        } else {
            self.inject(scenario, &id, lock, &mut notes, &mut failures)
                .await?
        };

        let final_status = self.wait_for_final(&id, sent, timeout).await;
        let time_to_final = final_status.as_ref().map(|(_, took)| took.as_secs_f64());
        let fault_to_final = final_status.as_ref().map(|_| fault_at.elapsed().as_secs_f64());
        let longest_stall = stalls.finish().await.map(|stall| stall.as_secs_f64());
        if scenario.is_node_loss() {
            self.kit.restore(&mut notes).await?;
        }
        let pushes_after_cancel = match &cancelled {
            Some(cancelled) => cancelled.check(&self.cluster, &mut failures).await,
            None => None,
        };
        tokio::time::sleep(SETTLE).await;
        let status = match &final_status {
            Some((status, _)) => status.clone(),
            None => {
                // Keep a stuck send from leaking into the next scenario.
                let _ = self.cancel(&id).await;
                self.cluster
                    .get(&format!("/api/v1/notifications/{id}"))
                    .await
                    .unwrap_or(Value::Null)
            }
        };
        let (delivered, duplicates, answers) = self.mock_figures();
        let panics = count_panics(self.cluster.log_dir()).saturating_sub(panics_before);
        let audience = status["audience"]["total"].as_u64().unwrap_or(0);
        let reachable = devices;
        let final_word = match &final_status {
            Some((status, _)) => status["status"].as_str().unwrap_or("?").to_owned(),
            None => format!(
                "none after {} s ({})",
                timeout.as_secs(),
                status["status"].as_str().unwrap_or("?")
            ),
        };
        let duplicate_bound = self.duplicate_bound(scenario);
        let bound = format!(
            "complete, {reachable} of {reachable} delivered, duplicates ≤ {duplicate_bound} ({}), {}0 panics",
            self.bound_reason(scenario),
            if scenario.is_node_loss() {
                "the cancelled send still cancelled with 0 pushes, "
            } else {
                ""
            }
        );
        if final_word != "complete" {
            failures.push(format!("final status {final_word}"));
        }
        if delivered < reachable {
            failures.push(format!("{} devices never delivered", reachable - delivered));
        }
        if duplicates > duplicate_bound {
            failures.push(format!("{duplicates} duplicates > {duplicate_bound}"));
        }
        if panics > 0 {
            failures.push(format!("{panics} panics logged"));
        }
        match scenario {
            Scenario::OauthHang => notes.push(format!(
                "connections to the token endpoint at the end: {}",
                self.token_proxy.connections_accepted()
            )),
            Scenario::BlackHole => notes.push(format!(
                "APNs connections opened by the end: {}",
                self.apns_proxy.connections_accepted()
            )),
            _ => {}
        }
        notes.push(format!("status: {}", brief(&status)));
        Ok(ScenarioResult {
            scenario: scenario.name(),
            run: RunOf::default(),
            fault,
            audience,
            reachable,
            delivered,
            delivered_percent: percent(delivered, reachable),
            duplicate_pushes: duplicates,
            duplicate_bound,
            pushes_after_cancel,
            accepted_at_fault,
            time_to_final_status_s: time_to_final,
            fault_to_final_status_s: fault_to_final,
            longest_stall_s: longest_stall,
            final_status: final_word,
            panics,
            bound,
            passed: failures.is_empty(),
            failures,
            notes,
            answers_by_status: answers,
        })
    }

    /// Injects the scenario's fault and recovers from it; describes what
    /// was done.
    async fn inject(
        &mut self,
        scenario: Scenario,
        id: &str,
        lock: Option<RestartLock>,
        notes: &mut Vec<String>,
        failures: &mut Vec<String>,
    ) -> Result<String> {
        let at = format!("at {} accepted pushes", self.accepted());
        if let Some(target) = scenario.target() {
            let member = self.member(target)?;
            let name = self.process_name(member);
            let down = Instant::now();
            if scenario.is_kill() {
                if let Some(service) = self.cluster.member_mut(member) {
                    service.kill();
                }
            } else {
                let grace =
                    Duration::from_secs(setting(&self.args.settings, "CLARION_SHUTDOWN_GRACE_SECS", 30));
                let outcome = self
                    .cluster
                    .member_mut(member)
                    .and_then(|service| service.terminate(grace + Duration::from_secs(10)));
                match outcome {
                    Some((status, took)) => {
                        notes.push(format!(
                            "{name} exited ({status}) {:.1} s after SIGTERM",
                            took.as_secs_f64()
                        ));
                        if !status.success() {
                            failures.push(format!("{name} exited with {status} after SIGTERM"));
                        }
                    }
                    None => failures.push(format!(
                        "{name} had not exited {} s after SIGTERM (killed)",
                        grace.as_secs() + 10
                    )),
                }
            }
            if target == Target::Harvester {
                notes.push(format!(
                    "jobs when the harvester went down: {}",
                    self.jobs(id).await
                ));
            }
            self.cluster.restart(member).await?;
            let verb = if scenario.is_kill() { "SIGKILL" } else { "SIGTERM" };
            return Ok(format!(
                "{verb} to {name} {at}; restarted, ready {:.1} s after the signal",
                down.elapsed().as_secs_f64()
            ));
        }
        match scenario {
            Scenario::Baseline => Ok("none".into()),
            Scenario::BrokerRestart => {
                let outage = Duration::from_secs(self.args.broker_outage_secs);
                let down = Instant::now();
                let stopped = run_command("rabbitmqctl", &["stop_app"]).await;
                if stopped.is_ok() {
                    tokio::time::sleep(outage).await;
                }
                let back = restore_broker().await;
                drop(lock);
                stopped?;
                back?;
                Ok(format!(
                    "rabbitmqctl stop_app {at}; start_app after {} s, broker back {:.1} s after the stop",
                    outage.as_secs(),
                    down.elapsed().as_secs_f64()
                ))
            }
            Scenario::PostgresRestart => {
                let (version, name) = self
                    .args
                    .postgres_cluster
                    .split_once('/')
                    .context("--postgres-cluster is VERSION/NAME")?;
                let down = Instant::now();
                let restarted = run_command("pg_ctlcluster", &[version, name, "restart"]).await;
                if restarted.is_err() {
                    let _ = run_command("pg_ctlcluster", &[version, name, "start"]).await;
                }
                let back = wait_for_postgres().await;
                drop(lock);
                restarted?;
                back?;
                Ok(format!(
                    "pg_ctlcluster {version} {name} restart {at}; accepting connections {:.1} s later",
                    down.elapsed().as_secs_f64()
                ))
            }
            Scenario::Storm5xx => {
                let storm = FaultConfig {
                    error_rates: BTreeMap::from([(500, 0.5), (503, 0.5)]),
                    ..self.base_faults.clone()
                };
                self.storm(storm).await;
                Ok(format!(
                    "every push answered 500 or 503 (half each) for {} s, {at}",
                    self.args.storm_secs
                ))
            }
            Scenario::Storm429 => {
                let storm = FaultConfig {
                    error_rates: BTreeMap::from([(429, 1.0)]),
                    retry_after_s: Some(self.args.storm_retry_after_secs),
                    ..self.base_faults.clone()
                };
                // FCM's 429 (the project's quota) carries Retry-After and
                // pauses every push of the dispatcher; Apple's 429 is per
                // device and carries none, so the storm is Google's.
                self.fcm.state.faults.set(storm);
                tokio::time::sleep(Duration::from_secs(self.args.storm_secs)).await;
                self.fcm.state.faults.set(self.base_faults.clone());
                Ok(format!(
                    "every FCM push answered 429 QUOTA_EXCEEDED with Retry-After: {} for {} s, {at}",
                    self.args.storm_retry_after_secs, self.args.storm_secs
                ))
            }
            Scenario::OauthHang => {
                let before = self.token_proxy.connections_accepted();
                self.token_proxy.black_hole_open();
                self.token_proxy.black_hole_new();
                self.fcm.revoke_access_tokens();
                tokio::time::sleep(Duration::from_secs(self.args.oauth_hang_secs)).await;
                self.token_proxy.restore();
                notes.push(format!(
                    "connections to the token endpoint: {before} before the hang, {} when it was restored",
                    self.token_proxy.connections_accepted()
                ));
                Ok(format!(
                    "FCM access tokens revoked (answered 401) and the OAuth2 token endpoint hanging (connections taken, never answered) for {} s, {at}",
                    self.args.oauth_hang_secs
                ))
            }
            Scenario::BlackHole => {
                let before = self.apns_proxy.connections_accepted();
                self.apns_proxy.black_hole_open();
                notes.push(format!("{before} APNs connections opened before the black hole"));
                Ok(format!(
                    "the iOS dispatcher's open connections to APNs black-holed (no data, no FIN, no RST) {at}; new connections pass"
                ))
            }
            _ => bail!("{} has no fault", scenario.name()),
        }
    }

    /// Harvester and dispatchers stopped; a send; a cancel; the workers
    /// started again: nothing may be pushed after the cancel's 200.
    async fn cancel_with_workers_down(&mut self) -> Result<ScenarioResult> {
        let scenario = Scenario::CancelWorkersDown;
        let timeout = Duration::from_secs(self.args.scenario_timeout_secs);
        self.reset_mocks();
        let panics_before = count_panics(self.cluster.log_dir());
        let mut notes = Vec::new();
        let mut failures = Vec::new();
        let workers = self.workers();
        for member in &workers {
            if let Some(service) = self.cluster.member_mut(*member) {
                service.stop();
            }
        }
        let sent = Instant::now();
        let id = self
            .cluster
            .send(&json!({"topics": [TOPIC], "title": "Chaos", "body": scenario.name()}))
            .await?;
        let (code, answer) = self.cancel(&id).await?;
        let acknowledged = Instant::now();
        let accepted_at_ack = self.accepted();
        notes.push(format!(
            "cancel answered {code} {:.2} s after the send",
            sent.elapsed().as_secs_f64()
        ));
        if code != StatusCode::OK {
            failures.push(format!("cancel answered {code}: {answer}"));
        }
        for member in &workers {
            self.cluster.restart(*member).await?;
        }
        notes.push(format!(
            "harvester and dispatchers ready {:.1} s after the cancel",
            acknowledged.elapsed().as_secs_f64()
        ));
        // Watch until every job is accounted for, then a while longer: a
        // worker that ignored the cancel would push in that time.
        let deadline = Instant::now() + timeout.min(Duration::from_secs(60));
        loop {
            let path = format!("/api/v1/notifications/{id}");
            if let Ok(Ok(status)) = tokio::time::timeout(API_TIMEOUT, self.cluster.get(&path)).await {
                let jobs = &status["jobs"];
                let planned = jobs["planned"].as_u64().unwrap_or(u64::MAX);
                let done = jobs["done"].as_u64().unwrap_or(0) + jobs["failed"].as_u64().unwrap_or(0);
                if done >= planned {
                    notes.push(format!(
                        "every shard job reported {:.1} s after the cancel",
                        acknowledged.elapsed().as_secs_f64()
                    ));
                    break;
                }
            }
            if Instant::now() > deadline {
                notes.push("not every shard job reported within 60 s of the cancel".into());
                break;
            }
            tokio::time::sleep(STATUS_POLL).await;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        let final_status = self.wait_for_final(&id, sent, timeout).await;
        let status = final_status.as_ref().map_or(Value::Null, |(s, _)| s.clone());
        let final_word = status["status"].as_str().unwrap_or("none").to_owned();
        let (delivered, duplicates, answers) = self.mock_figures();
        let after_cancel = self.accepted().saturating_sub(accepted_at_ack);
        let panics = count_panics(self.cluster.log_dir()).saturating_sub(panics_before);
        if final_word != "cancelled" {
            failures.push(format!("final status {final_word}"));
        }
        if after_cancel > 0 {
            failures.push(format!("{after_cancel} pushes after the cancel was acknowledged"));
        }
        if panics > 0 {
            failures.push(format!("{panics} panics logged"));
        }
        notes.push(format!("status: {}", brief(&status)));
        Ok(ScenarioResult {
            scenario: scenario.name(),
            run: RunOf::default(),
            fault: "harvester and both dispatchers stopped (SIGTERM); send; cancel; workers started again"
                .into(),
            audience: status["audience"]["total"].as_u64().unwrap_or(0),
            reachable: self.args.devices,
            delivered,
            delivered_percent: percent(delivered, self.args.devices),
            duplicate_pushes: duplicates,
            duplicate_bound: 0,
            pushes_after_cancel: Some(after_cancel),
            accepted_at_fault: None,
            time_to_final_status_s: final_status.map(|(_, took)| took.as_secs_f64()),
            fault_to_final_status_s: None,
            longest_stall_s: None,
            final_status: final_word,
            panics,
            bound: "cancelled, 0 pushes after the cancel's 200, 0 panics".into(),
            passed: failures.is_empty(),
            failures,
            notes,
            answers_by_status: answers,
        })
    }

    /// A scenario that could not be run to its end.
    fn errored(&self, scenario: Scenario, err: &anyhow::Error) -> ScenarioResult {
        let (delivered, duplicates, answers) = self.mock_figures();
        ScenarioResult {
            scenario: scenario.name(),
            run: RunOf::default(),
            fault: "not completed".into(),
            audience: 0,
            reachable: self.args.devices,
            delivered,
            delivered_percent: percent(delivered, self.args.devices),
            duplicate_pushes: duplicates,
            duplicate_bound: self.duplicate_bound(scenario),
            pushes_after_cancel: None,
            accepted_at_fault: None,
            time_to_final_status_s: None,
            fault_to_final_status_s: None,
            longest_stall_s: None,
            final_status: "unknown".into(),
            panics: 0,
            bound: String::new(),
            passed: false,
            failures: vec![format!("the scenario could not run: {err:#}")],
            notes: Vec::new(),
            answers_by_status: answers,
        }
    }

    fn duplicate_bound(&self, scenario: Scenario) -> u64 {
        use Scenario::*;
        match scenario {
            Kill9Harvester => self.bounds.harvester_in_flight,
            Kill9DispatcherIos | Kill9DispatcherAndroid => self.bounds.dispatcher_in_hand,
            BrokerRestart => self.args.devices / 50,
            BlackHole => self.bounds.pushes_in_flight,
            RabbitKillHarvestLeader | RabbitKillDeliverIosLeader | RabbitPartition | PostgresFailover => {
                self.bounds.node_in_flight
            }
            // Each of the three restarts may make the pipeline redo what was in flight.
            RabbitRollingRestart => 3 * self.bounds.node_in_flight,
            _ => 0,
        }
    }

    fn bound_reason(&self, scenario: Scenario) -> &'static str {
        use Scenario::*;
        match scenario {
            Kill9Harvester => "harvest workers × publish window × batch size",
            Kill9DispatcherIos | Kill9DispatcherAndroid => "batch workers × prefetch × batch size",
            BrokerRestart => "2% of the audience",
            BlackHole => "pushes in flight: batch workers × streams per batch",
            RabbitKillHarvestLeader | RabbitKillDeliverIosLeader | RabbitPartition | PostgresFailover => {
                "in flight: the harvester's unconfirmed batches (workers × publish window × batch size) \
                 plus both dispatchers' batches in hand (batch workers × prefetch × batch size)"
            }
            RabbitRollingRestart => "three times what is in flight: once per restarted node",
            SigtermCoordinator | SigtermHarvester | SigtermDispatcherIos | SigtermDispatcherAndroid => {
                "a graceful shutdown finishes and acks what it holds"
            }
            Storm5xx | Storm429 | OauthHang => "a refused push was not delivered, its retry is no duplicate",
            _ => "nothing that pushes or harvests loses work in flight",
        }
    }

    fn reset_mocks(&self) {
        for state in [&self.apns.state, &self.fcm.state] {
            state.faults.set(self.base_faults.clone());
            state.accounting.reset();
        }
        self.token_proxy.restore();
        self.apns_proxy.restore();
    }

    async fn storm(&self, storm: FaultConfig) {
        for state in [&self.apns.state, &self.fcm.state] {
            state.faults.set(storm.clone());
        }
        tokio::time::sleep(Duration::from_secs(self.args.storm_secs)).await;
        for state in [&self.apns.state, &self.fcm.state] {
            state.faults.set(self.base_faults.clone());
        }
    }

    fn accepted(&self) -> u64 {
        self.apns.state.accounting.counters().accepted + self.fcm.state.accounting.counters().accepted
    }

    /// Distinct tokens accepted, duplicate pushes, answers by status.
    fn mock_figures(&self) -> (u64, u64, BTreeMap<u16, u64>) {
        let apns = self.apns.state.accounting.stats();
        let fcm = self.fcm.state.accounting.stats();
        let mut answers = apns.by_status.clone();
        for (status, count) in fcm.by_status {
            *answers.entry(status).or_default() += count;
        }
        (
            apns.unique_tokens + fcm.unique_tokens,
            apns.duplicate_pushes + fcm.duplicate_pushes,
            answers,
        )
    }

    /// Waits until the mocks accepted `threshold` pushes; returns how many.
    async fn wait_for_accepted(&self, threshold: u64, deadline: Instant) -> Result<u64> {
        loop {
            let accepted = self.accepted();
            if accepted >= threshold {
                return Ok(accepted);
            }
            if Instant::now() > deadline {
                bail!("only {accepted} pushes accepted, waiting for {threshold}");
            }
            tokio::time::sleep(TRIGGER_POLL).await;
        }
    }

    /// Polls the notification until it is complete, failed or cancelled;
    /// `None` if it is not by the deadline.
    async fn wait_for_final(&self, id: &str, sent: Instant, timeout: Duration) -> Option<(Value, Duration)> {
        let path = format!("/api/v1/notifications/{id}");
        loop {
            // Errors are expected while the coordinator or its database is down.
            if let Ok(Ok(status)) = tokio::time::timeout(API_TIMEOUT, self.cluster.get(&path)).await
                && matches!(
                    status["status"].as_str(),
                    Some("complete" | "failed" | "cancelled")
                )
            {
                return Some((status, sent.elapsed()));
            }
            if sent.elapsed() > timeout {
                return None;
            }
            tokio::time::sleep(STATUS_POLL).await;
        }
    }

    async fn jobs(&self, id: &str) -> String {
        let path = format!("/api/v1/notifications/{id}");
        match tokio::time::timeout(API_TIMEOUT, self.cluster.get(&path)).await {
            Ok(Ok(status)) => format!(
                "{} of {} reported done",
                status["jobs"]["done"], status["jobs"]["planned"]
            ),
            Ok(Err(err)) => format!("unknown ({err})"),
            Err(_) => "unknown (no answer)".into(),
        }
    }

    async fn cancel(&self, id: &str) -> Result<(StatusCode, Value)> {
        self.cluster.cancel(id).await
    }

    fn member(&self, target: Target) -> Result<Member> {
        match target {
            Target::Coordinator => Ok(Member::Coordinator),
            Target::Harvester => Ok(Member::Harvester(0)),
            Target::Dispatcher(platform) => self
                .cluster
                .dispatchers
                .iter()
                .position(|d| d.setting("CLARION_PLATFORM") == Some(platform.as_str()))
                .map(Member::Dispatcher)
                .with_context(|| format!("no {platform} dispatcher")),
        }
    }

    fn process_name(&mut self, member: Member) -> String {
        self.cluster
            .member_mut(member)
            .map_or_else(|| format!("{member:?}"), |service| service.name.clone())
    }

    fn workers(&self) -> Vec<Member> {
        let mut members: Vec<Member> = (0..self.cluster.harvesters.len())
            .map(Member::Harvester)
            .collect();
        members.extend((0..self.cluster.dispatchers.len()).map(Member::Dispatcher));
        members
    }

    /// Starts again whatever is not running — and, after a failed
    /// scenario, every worker, so a failure does not carry over — then
    /// waits until the mocks receive nothing more, so the next scenario
    /// starts from a whole, quiet cluster.
    async fn heal(&mut self, after_failure: bool) {
        let mut members = vec![Member::Coordinator];
        members.extend(self.workers());
        for member in members {
            let down = self
                .cluster
                .member_mut(member)
                .is_some_and(|service| service.pid().is_none() || service.ensure_running().is_err());
            let restart = down || (after_failure && member != Member::Coordinator);
            if restart {
                println!("  restarting {member:?}");
                if let Err(err) = self.cluster.restart(member).await {
                    println!("  could not restart {member:?}: {err:#}");
                }
            }
        }
        self.reset_mocks();
        self.quiesce().await;
    }

    /// Waits (at most `QUIET_WITHIN`) until the mocks have accepted nothing
    /// for `QUIET_FOR`: leftovers of a failed send are pushed before the
    /// next scenario counts.
    async fn quiesce(&self) {
        let started = Instant::now();
        let mut last = (self.accepted(), Instant::now());
        while started.elapsed() < QUIET_WITHIN {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = self.accepted();
            if now != last.0 {
                last = (now, Instant::now());
            } else if last.1.elapsed() >= QUIET_FOR {
                return;
            }
        }
        println!("  the mocks were still receiving pushes {QUIET_WITHIN:?} after the scenario");
    }
}

/// Held while a shared service is down: `/tmp/clarion-chaos-restarting`
/// exists from `acquire` until it is dropped.
struct RestartLock;

impl RestartLock {
    /// Waits (at most `patience`) until the test suite is not running, then
    /// takes the lock.
    async fn acquire(patience: Duration) -> Result<Self> {
        let deadline = Instant::now() + patience;
        let mut told = false;
        while Path::new(TESTS_RUNNING).exists() {
            if !told {
                println!("  waiting for the test suite ({TESTS_RUNNING}) to finish");
                told = true;
            }
            if Instant::now() > deadline {
                bail!("the test suite still held the shared services after {patience:?}");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        std::fs::write(CHAOS_RESTARTING, format!("{}\n", std::process::id()))
            .with_context(|| format!("creating {CHAOS_RESTARTING}"))?;
        Ok(Self)
    }
}

impl Drop for RestartLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(CHAOS_RESTARTING);
    }
}

/// Runs `program args` under `timeout`, failing unless it succeeds.
async fn run_command(program: &str, args: &[&str]) -> Result<()> {
    let mut command = Command::new("timeout");
    command
        .arg(COMMAND_LIMIT_SECS.to_string())
        .arg(program)
        .args(args);
    let line = format!("{program} {}", args.join(" "));
    let output = tokio::task::spawn_blocking(move || command.output())
        .await?
        .with_context(|| format!("running {line}"))?;
    if !output.status.success() {
        bail!(
            "{line}: {}; {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// `start_app` and `await_startup`, tried up to three times.
async fn restore_broker() -> Result<()> {
    let mut last = None;
    for _ in 0..3 {
        match async {
            run_command("rabbitmqctl", &["start_app"]).await?;
            run_command("rabbitmqctl", &["await_startup"]).await
        }
        .await
        {
            Ok(()) => return Ok(()),
            Err(err) => last = Some(err),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("RabbitMQ did not come back")))
}

/// Waits until PostgreSQL accepts connections again.
async fn wait_for_postgres() -> Result<()> {
    let deadline = Instant::now() + SERVICE_BACK_WITHIN;
    loop {
        if run_command("pg_isready", &["-h", "127.0.0.1", "-p", "5432"])
            .await
            .is_ok()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("PostgreSQL not accepting connections {SERVICE_BACK_WITHIN:?} after its restart");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Lines saying a thread panicked, over every log of the cluster.
fn count_panics(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "log"))
        .map(|entry| {
            std::fs::read_to_string(entry.path())
                .unwrap_or_default()
                .lines()
                .filter(|line| line.contains("panicked"))
                .count() as u64
        })
        .sum()
}

/// The `host:port` of an `https://host:port/...` URL.
fn socket_addr(url: &str) -> Result<SocketAddr> {
    let rest = url.strip_prefix("https://").unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or(rest);
    authority
        .parse()
        .with_context(|| format!("{url} does not name an IP address and port"))
}

/// A numeric setting from `env` (the last one wins), or `default`.
fn setting(env: &[(String, String)], key: &str, default: u64) -> u64 {
    env.iter()
        .rev()
        .find(|(k, _)| k == key)
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(default)
}

fn env_strings(env: &[(String, String)]) -> Vec<String> {
    env.iter().map(|(key, value)| format!("{key}={value}")).collect()
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    (part as f64 * 10_000.0 / whole as f64).round() / 100.0
}

fn seconds(value: Option<f64>) -> String {
    value.map_or_else(|| "—".to_owned(), |s| format!("{s:.1} s"))
}

/// The parts of a notification's status worth keeping in the report.
fn brief(status: &Value) -> Value {
    json!({
        "status": status["status"],
        "jobs": status["jobs"],
        "audience": status["audience"],
        "delivery": status["delivery"],
        "failure_reason": status["failure_reason"],
    })
}

/// The results as a Markdown table (what the README shows).
pub fn markdown_table(results: &[ScenarioResult]) -> String {
    let mut table = String::from(
        "| scenario | delivered | duplicates (bound) | time to final status | fault to final (longest stall) | final status | panics | passed |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        let delivered = match (r.pushes_after_cancel, r.final_status.as_str()) {
            (Some(after), "cancelled") => format!("{after} pushes after the cancel"),
            (Some(after), _) => format!(
                "{:.2}% ({}/{}); {after} pushes of the cancelled send",
                r.delivered_percent, r.delivered, r.reachable
            ),
            (None, _) => format!("{:.2}% ({}/{})", r.delivered_percent, r.delivered, r.reachable),
        };
        let recovery = match (r.fault_to_final_status_s, r.longest_stall_s) {
            (Some(took), Some(stall)) => format!("{took:.1} s ({stall:.1} s)"),
            _ => "—".to_owned(),
        };
        table.push_str(&format!(
            "| {} | {} | {} ({}) | {} | {} | {} | {} | {} |\n",
            r.scenario,
            delivered,
            r.duplicate_pushes,
            r.duplicate_bound,
            seconds(r.time_to_final_status_s),
            recovery,
            r.final_status,
            r.panics,
            if r.passed { "yes" } else { "**no**" }
        ));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_urls_and_percentages_read_as_expected() {
        let env = vec![
            ("CLARION_BATCH_SIZE".to_owned(), "1000".to_owned()),
            ("CLARION_BATCH_SIZE".to_owned(), "250".to_owned()),
        ];
        assert_eq!(setting(&env, "CLARION_BATCH_SIZE", 1), 250);
        assert_eq!(setting(&env, "CLARION_HARVEST_WORKERS", 4), 4);
        assert_eq!(
            socket_addr("https://127.0.0.1:4443/token").ok(),
            Some(SocketAddr::from(([127, 0, 0, 1], 4443)))
        );
        assert!(socket_addr("https://localhost/token").is_err());
        assert_eq!(percent(1, 3), 33.33);
        assert_eq!(percent(5, 0), 0.0);
    }

    #[test]
    fn every_scenario_has_a_distinct_name_and_kills_name_a_target() {
        let names: std::collections::HashSet<String> = Scenario::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names.len(), Scenario::ALL.len());
        assert!(names.contains("kill9-dispatcher-ios"), "{names:?}");
        assert!(names.contains("rabbit-kill-harvest-leader"), "{names:?}");
        // Node loss never touches the machine's services.
        assert_eq!(Scenario::RabbitPartition.servers(), Servers::BrokerCluster);
        assert_eq!(Scenario::PostgresFailover.servers(), Servers::PostgresPair);
        assert_eq!(Scenario::BrokerRestart.servers(), Servers::Machine);
        for scenario in Scenario::ALL {
            if scenario.is_kill() {
                assert!(scenario.target().is_some(), "{scenario:?}");
            }
        }
    }
}
