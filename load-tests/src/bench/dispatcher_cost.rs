//! Instructions per push of one dispatcher, counted by
//! `valgrind --tool=callgrind`: repeatable whatever else the machine does,
//! unlike seconds. For each platform in turn: a cluster of its own (a
//! namespace of its own), one dispatcher started under callgrind, its
//! counters zeroed once it is ready (start-up aside), one notification to
//! the benchmark audience, and, once the mock has accepted every device of
//! that platform, the dispatcher stopped so callgrind writes its totals.
//! What it counts is all a dispatcher does per push in production:
//! consuming and decoding batches, pushing over HTTP/2 and TLS, publishing
//! its reports.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clarion_proto::Platform;
use serde::Serialize;
use serde_json::json;

use super::run::{Machine, dispatcher_env_for, machine};
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
    #[arg(long, default_value = "load-tests/results")]
    pub out_dir: PathBuf,
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
    /// Instructions the dispatcher executed from ready to stopped.
    pub instructions: u64,
    pub instructions_per_push: f64,
    /// callgrind's output, for `callgrind_annotate`.
    pub callgrind_file: PathBuf,
}

pub async fn run(args: DispatcherCostArgs) -> Result<DispatcherCost> {
    let shape = AudienceShape {
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
            "{platform:<8} {:>8} pushes  {:>14} instructions  {:>8.0} per push",
            cost.pushes, cost.instructions, cost.instructions_per_push
        );
    }
    Ok(report)
}

async fn measure(args: &DispatcherCostArgs, platform: Platform, out_dir: &Path) -> Result<PlatformCost> {
    let work = std::env::temp_dir().join(format!("clarion-cost-{platform}-{}", std::process::id()));
    let (apns, fcm) = super::start_mocks(&work).await?;
    let namespace = format!("cost-{platform}-{}", std::process::id());
    let config = LocalClusterConfig {
        database_url: args.audience.database_url.clone(),
        amqp_url: args.audience.amqp_url.clone(),
        namespace: namespace.clone(),
        harvesters: 1,
        // Every job released at once: the other platform's batches, which
        // no dispatcher takes in this run, must not hold the harvest back.
        coordinator_env: super::overtake::UNSCHEDULED
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect(),
        harvester_env: Vec::new(),
        dispatcher_env: Vec::new(),
        log_dir: super::bench_log_dir()?,
    };
    let mut cluster = LocalCluster::start(&config).await?;
    cluster.set_dispatcher_env(dispatcher_env_for(&apns, &fcm, &work)?);
    let callgrind_file = out_dir.join(format!("callgrind.dispatcher-{platform}.out"));
    let outcome = async {
        let wrapper = vec![
            "valgrind".to_owned(),
            "--tool=callgrind".to_owned(),
            format!("--callgrind-out-file={}", callgrind_file.display()),
        ];
        cluster.start_dispatcher_under(&wrapper, platform).await?;
        let pid = cluster
            .dispatchers
            .last()
            .and_then(|d| d.pid())
            .context("the dispatcher is not running")?;
        zero_counters(pid)?;
        let id = cluster
            .send(&json!({"topics": ["breaking/uk"], "title": "Cost", "body": "per push"}))
            .await?;
        let counters = || match platform {
            Platform::Ios => apns.state.accounting.counters(),
            Platform::Android => fcm.state.accounting.counters(),
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
        let dispatcher = cluster.dispatchers.last_mut().context("no dispatcher")?;
        // SIGTERM: a graceful stop, after which callgrind writes its totals.
        if dispatcher.terminate(Duration::from_secs(120)).is_none() {
            bail!("the dispatcher under callgrind did not stop");
        }
        let instructions = total_instructions(&callgrind_file)?;
        Ok(PlatformCost {
            devices,
            pushes,
            instructions,
            instructions_per_push: instructions as f64 / pushes.max(1) as f64,
            callgrind_file: callgrind_file.clone(),
        })
    }
    .await;
    cluster.stop();
    delete_namespace(&args.audience.amqp_url, &namespace).await;
    let _ = std::fs::remove_dir_all(&work);
    outcome
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
