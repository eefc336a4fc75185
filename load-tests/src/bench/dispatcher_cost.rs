//! What one dispatcher costs per push. With `--counter callgrind` (the
//! default): instructions, counted by `valgrind --tool=callgrind`,
//! repeatable whatever else the machine does, unlike seconds. With
//! `--counter perf`: CPU time (user and kernel), system calls and context
//! switches, counted by `perf stat` while the dispatcher runs at full
//! speed, which callgrind cannot show.
//!
//! For each platform in turn: a cluster of its own (a namespace of its
//! own), one dispatcher, counted from the moment it is ready (start-up
//! aside), one notification to the benchmark audience, and, once the mock
//! has accepted every device of that platform, the counting stopped. What
//! it counts is all a dispatcher does per push in production: consuming and
//! decoding batches, pushing over HTTP/2 and TLS, publishing its reports.
//! perf stops counting once the mock has accepted the last push; callgrind
//! counts until the dispatcher has stopped, so it also counts the last
//! reports and the graceful stop.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clarion_proto::Platform;
use serde::Serialize;
use serde_json::json;

use super::perf_stat::{PerfCounts, PerfStat};
use super::run::{Machine, machine};
use super::{AudienceArgs, git_commit, load_audience, write_json};
use crate::audience::{AudienceShape, Layout};
use crate::local_cluster::{LocalCluster, LocalClusterConfig, delete_namespace};

#[derive(Debug, Clone, clap::Args)]
pub struct DispatcherCostArgs {
    /// The audience (`--devices`, half of them iPhones) and where it lives.
    #[command(flatten)]
    pub audience: AudienceArgs,
    /// Give up when one platform's pushes take longer than this.
    #[arg(long, default_value_t = 900)]
    pub timeout_secs: u64,
    /// Name of the result file under `--out-dir`.
    #[arg(long, default_value = "dispatcher-cost")]
    pub name: String,
    #[arg(long, default_value_os_t = super::default_results_dir())]
    pub out_dir: PathBuf,
    /// What counts the cost: instructions (callgrind) or CPU time, system
    /// calls and context switches at full speed (perf stat).
    #[arg(long, value_enum, default_value_t = Counter::Callgrind)]
    pub counter: Counter,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Counter {
    Callgrind,
    Perf,
}

#[derive(Debug, Serialize)]
pub struct DispatcherCost {
    pub ios: PlatformCost,
    pub android: PlatformCost,
    pub machine: Machine,
    pub git_commit: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct PlatformCost {
    /// Devices of the platform in the audience.
    pub devices: u64,
    /// Pushes the mock accepted (more than `devices` when a batch was
    /// delivered twice).
    pub pushes: u64,
    #[serde(flatten)]
    pub cost: Cost,
}

/// What the counter counted from ready to done.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Cost {
    Instructions {
        /// Instructions the dispatcher executed from ready to stopped.
        instructions: u64,
        instructions_per_push: f64,
        /// callgrind's output, for `callgrind_annotate`.
        callgrind_file: PathBuf,
    },
    PerfStat {
        #[serde(flatten)]
        totals: PerfCounts,
        cpu_us_per_push: f64,
        user_us_per_push: f64,
        system_us_per_push: f64,
        syscalls_per_push: f64,
        context_switches_per_push: f64,
    },
}

impl Cost {
    fn summary_line(&self) -> String {
        match self {
            Cost::Instructions {
                instructions,
                instructions_per_push,
                ..
            } => format!("{instructions:>14} instructions  {instructions_per_push:>8.0} per push"),
            Cost::PerfStat {
                cpu_us_per_push,
                user_us_per_push,
                system_us_per_push,
                syscalls_per_push,
                context_switches_per_push,
                ..
            } => format!(
                "{cpu_us_per_push:>6.2} CPU µs per push ({user_us_per_push:.2} user, {system_us_per_push:.2} kernel)  \
                 {syscalls_per_push:.3} system calls  {context_switches_per_push:.3} context switches per push"
            ),
        }
    }

    fn from_perf(counts: PerfCounts, pushes: u64) -> Self {
        let per_push = |total: f64| per_push(total, pushes);
        Cost::PerfStat {
            cpu_us_per_push: per_push(counts.cpu_ms * 1000.0),
            user_us_per_push: per_push(counts.user_ms * 1000.0),
            system_us_per_push: per_push(counts.system_ms * 1000.0),
            syscalls_per_push: per_push(counts.syscalls as f64),
            context_switches_per_push: per_push(counts.context_switches as f64),
            totals: counts,
        }
    }
}

pub async fn run(args: DispatcherCostArgs) -> Result<DispatcherCost> {
    let shape = AudienceShape {
        web_percent: 0,
        ios_percent: 50,
        dead_percent: 0,
        layout: Layout::Single,
        locales: 0,
    };
    load_audience(&args.audience, shape, 1).await?;
    std::fs::create_dir_all(&args.out_dir)?;
    let out_dir = std::fs::canonicalize(&args.out_dir)?;
    let ios = measure(&args, Platform::Ios, &out_dir).await?;
    let android = measure(&args, Platform::Android, &out_dir).await?;
    let report = DispatcherCost {
        ios,
        android,
        machine: machine(),
        git_commit: git_commit(),
    };
    write_json(&out_dir.join(format!("{}.json", args.name)), &report)?;
    for (platform, cost) in [("iOS", &report.ios), ("Android", &report.android)] {
        println!(
            "{platform:<8} {:>8} pushes  {}",
            cost.pushes,
            cost.cost.summary_line()
        );
    }
    Ok(report)
}

async fn measure(args: &DispatcherCostArgs, platform: Platform, out_dir: &Path) -> Result<PlatformCost> {
    if platform == Platform::Web {
        anyhow::bail!("the dispatcher cost of web push is not measured yet");
    }
    let work = std::env::temp_dir().join(format!("clarion-cost-{platform}-{}", std::process::id()));
    let mocks = super::start_mocks(&work).await?;
    let (apns, fcm) = (&mocks.apns, &mocks.fcm);
    let namespace = format!("cost-{platform}-{}", std::process::id());
    let config = LocalClusterConfig {
        database_url: args.audience.database_url.clone(),
        amqp_url: args.audience.amqp_url.clone(),
        namespace: namespace.clone(),
        harvesters: 1,
        // Every job released at once: the other platform's batches, which
        // no dispatcher takes in this run, must not hold the harvest back.
        coordinator_env: super::run::UNSCHEDULED
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect(),
        harvester_env: Vec::new(),
        dispatcher_env: Vec::new(),
        log_dir: super::bench_log_dir()?,
    };
    let mut cluster = crate::bench::start_cluster(&config).await?;
    cluster.set_dispatcher_env(mocks.dispatcher_env(&work)?);
    let callgrind_file = out_dir.join(format!("callgrind.dispatcher-{platform}.out"));
    let perf_file = work.join("perf-stat.csv");
    let outcome = async {
        let wrapper = match args.counter {
            Counter::Callgrind => vec![
                "valgrind".to_owned(),
                "--tool=callgrind".to_owned(),
                format!("--callgrind-out-file={}", callgrind_file.display()),
            ],
            Counter::Perf => Vec::new(),
        };
        cluster.start_dispatcher_under(&wrapper, platform).await?;
        let pid = cluster
            .dispatchers
            .last()
            .and_then(|d| d.pid())
            .context("the dispatcher is not running")?;
        let perf = match args.counter {
            Counter::Callgrind => {
                zero_counters(pid)?;
                None
            }
            Counter::Perf => Some(PerfStat::attach(pid, &perf_file)?),
        };
        let id = cluster
            .send(&json!({"topics": ["breaking/uk"], "title": "Cost", "body": "per push"}))
            .await?;
        let counters = || match platform {
            Platform::Ios => apns.state.accounting.counters(),
            Platform::Android | Platform::Web => fcm.state.accounting.counters(),
        };
        let devices = wait_for_platform(
            &cluster,
            &id,
            platform,
            &|| counters().unique_tokens,
            args.timeout_secs,
        )
        .await?;
        // Every push the dispatcher made counts, a device pushed twice (a
        // batch delivered again) twice.
        let pushes = counters().accepted;
        if let Some(perf) = perf {
            let cost = Cost::from_perf(perf.finish().await?, pushes);
            return Ok(PlatformCost {
                devices,
                pushes,
                cost,
            });
        }
        let dispatcher = cluster.dispatchers.last_mut().context("no dispatcher")?;
        // SIGTERM: a graceful stop, after which callgrind writes its totals.
        if dispatcher.terminate(Duration::from_secs(120)).is_none() {
            bail!("the dispatcher under callgrind did not stop");
        }
        let instructions = total_instructions(&callgrind_file)?;
        Ok(PlatformCost {
            devices,
            pushes,
            cost: Cost::Instructions {
                instructions,
                instructions_per_push: per_push(instructions as f64, pushes),
                callgrind_file: callgrind_file.clone(),
            },
        })
    }
    .await;
    cluster.stop();
    delete_namespace(&args.audience.amqp_url, &namespace).await;
    let _ = std::fs::remove_dir_all(&work);
    outcome
}

/// `total` divided by the pushes (none counts as one).
fn per_push(total: f64, pushes: u64) -> f64 {
    total / pushes.max(1) as f64
}

/// Zeroes callgrind's counters in process `pid`: start-up is not counted.
fn zero_counters(pid: u32) -> Result<()> {
    let status = Command::new("callgrind_control")
        .arg("--zero")
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .status()
        .context("running callgrind_control (package valgrind)")?;
    if !status.success() {
        bail!("callgrind_control --zero {pid} failed: {status}");
    }
    Ok(())
}

/// Waits until the notification is harvested and the mock has accepted
/// every device of `platform`; returns how many that was.
async fn wait_for_platform(
    cluster: &LocalCluster,
    id: &str,
    platform: Platform,
    accepted: &impl Fn() -> u64,
    timeout_secs: u64,
) -> Result<u64> {
    let started = Instant::now();
    loop {
        let status = cluster.get(&format!("/api/v1/notifications/{id}")).await?;
        let jobs = &status["jobs"];
        let harvested = jobs["planned"].as_u64().is_some_and(|planned| {
            jobs["done"].as_u64().unwrap_or(0) + jobs["failed"].as_u64().unwrap_or(0) >= planned
        });
        let expected = status["audience"][platform.as_str()].as_u64().unwrap_or(0);
        if harvested && expected > 0 && accepted() >= expected {
            return Ok(expected);
        }
        if started.elapsed() > Duration::from_secs(timeout_secs) {
            bail!(
                "{platform}: {} of {expected} accepted after {timeout_secs} s",
                accepted()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The instruction total callgrind wrote (its `summary:` or `totals:` line).
fn total_instructions(file: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    parse_total(&text).with_context(|| format!("no totals in {}", file.display()))
}

fn parse_total(text: &str) -> Option<u64> {
    text.lines()
        .rev()
        .find_map(|line| {
            line.strip_prefix("totals:")
                .or_else(|| line.strip_prefix("summary:"))
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::parse_total;

    #[test]
    fn the_total_is_read_from_callgrinds_output() {
        let out = "events: Ir\nfn=main\n3 100\nsummary: 123456\ntotals: 123456\n";
        assert_eq!(parse_total(out), Some(123456));
        assert_eq!(parse_total("events: Ir\n"), None);
    }
}
