//! The FCM quota benchmark: several Android dispatchers share one project's
//! quota, which the mock FCM enforces as Google does (`429
//! RESOURCE_EXHAUSTED` / `QUOTA_EXCEEDED` past the minute's allowance until
//! the minute ends). One notification to an all-Android audience; partway
//! through, one replica is killed (SIGKILL) and the others must take over
//! its share. Measured on the mock's own counters: the fleet's accepted rate
//! against the quota before and after the kill, how long the takeover took,
//! quota answers per push, and whether every device got its push (and how
//! many twice: the killed replica's unacknowledged batches are delivered
//! again by the others).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clarion_proto::Platform;
use serde::Serialize;
use serde_json::{Value, json};

use super::run::{Machine, machine, parse_setting};
use super::{AudienceArgs, git_commit, load_audience, plot, write_json};
use crate::audience::{AudienceShape, Layout};
use crate::local_cluster::{Env, LocalCluster, LocalClusterConfig, delete_namespace};
use crate::mocks::{FaultConfig, FcmMock};

/// How often the mock's counters are read.
const SAMPLE: Duration = Duration::from_millis(250);
/// Rates are judged over windows this long.
const WINDOW_S: f64 = 2.0;
/// Consumers each dispatcher opens on its queue in this benchmark.
const BATCH_WORKERS: u32 = 4;

#[derive(Debug, Clone, clap::Args)]
pub struct PacingArgs {
    #[command(flatten)]
    pub audience: AudienceArgs,
    /// The project's quota the mock FCM enforces and the dispatchers share.
    #[arg(long, default_value_t = 120_000)]
    pub quota_per_minute: u64,
    /// Android dispatcher replicas.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=12))]
    pub replicas: u32,
    /// Kill one replica this long after the send (0: none).
    #[arg(long, default_value_t = 30)]
    pub kill_after_secs: u64,
    /// Give up (and fail) when the send takes longer than this.
    #[arg(long, default_value_t = 900)]
    pub timeout_secs: u64,
    /// Extra `KEY=VALUE` settings for every Clarion process (repeatable).
    #[arg(long = "set", value_parser = parse_setting)]
    pub settings: Vec<(String, String)>,
    /// Where the JSON report and the SVG plot are written.
    #[arg(long, default_value_os_t = super::default_results_dir())]
    pub out_dir: PathBuf,
}

#[derive(Debug, Serialize)]
pub struct PacingReport {
    pub audience: u64,
    pub quota_per_minute: u64,
    pub replicas: u32,
    /// The fleet's accepted rate from 5 s after the send to the kill (or to
    /// 90% of the audience), as a share of the quota.
    pub before_kill_quota_share: f64,
    /// From the takeover to 90% of the audience, as a share of the quota.
    pub after_takeover_quota_share: Option<f64>,
    pub killed_at_s: Option<f64>,
    /// Seconds from the kill until the fleet's rate over a 2 s window is
    /// back at 90% of the quota or more.
    pub takeover_s: Option<f64>,
    /// Requests the mock answered 429 `QUOTA_EXCEEDED`.
    pub quota_exceeded: u64,
    /// … as a share of every push request.
    pub quota_exceeded_share: f64,
    /// Devices that got their push, of the audience.
    pub delivered_unique: u64,
    pub lost: u64,
    /// Pushes accepted more than once for their device.
    pub duplicates: u64,
    pub duration_s: f64,
    pub machine: Machine,
    pub git_commit: Option<String>,
    pub configuration: Value,
    /// (seconds since the send, pushes accepted per second over the last
    /// sample window).
    pub rates: Vec<(f64, f64)>,
}

pub async fn run(args: PacingArgs) -> Result<PacingReport> {
    let shape = AudienceShape {
        web_percent: 0,
        ios_percent: 0,
        dead_percent: 0,
        layout: Layout::Single,
        locales: 0,
    };
    load_audience(&args.audience, shape, 1).await?;

    let work = std::env::temp_dir().join(format!("clarion-pacing-{}", std::process::id()));
    let mocks = super::start_mocks(&work).await?;
    let fcm = &mocks.fcm;
    fcm.state.faults.set(FaultConfig {
        quota_per_minute: Some(args.quota_per_minute),
        ..FaultConfig::default()
    });

    let mut dispatcher_env: Env = mocks
        .dispatcher_env(&work)?
        .into_iter()
        .filter(|(key, _)| key != "CLARION_FCM_QUOTA_PER_MINUTE")
        .collect();
    dispatcher_env.push((
        "CLARION_FCM_QUOTA_PER_MINUTE".into(),
        args.quota_per_minute.to_string(),
    ));
    dispatcher_env.push(("CLARION_DISPATCH_BATCH_WORKERS".into(), BATCH_WORKERS.to_string()));
    dispatcher_env.extend(args.settings.iter().cloned());
    let namespace = format!("pacing-{}", std::process::id());
    let config = LocalClusterConfig {
        database_url: args.audience.database_url.clone(),
        amqp_url: args.audience.amqp_url.clone(),
        namespace: namespace.clone(),
        harvesters: 1,
        coordinator_env: args.settings.clone(),
        harvester_env: args.settings.clone(),
        dispatcher_env: Vec::new(),
        log_dir: super::bench_log_dir()?,
    };
    let mut cluster = crate::bench::start_cluster(&config).await?;
    let outcome = measure(&mut cluster, &args, fcm, dispatcher_env).await;
    cluster.stop();
    delete_namespace(&args.audience.amqp_url, &namespace).await;
    let _ = std::fs::remove_dir_all(&work);
    let report = outcome?;

    std::fs::create_dir_all(&args.out_dir)?;
    write_json(&args.out_dir.join("pacing.json"), &report)?;
    plot::rate_curve(
        &args.out_dir.join("pacing.svg"),
        &format!(
            "{} Android dispatchers sharing a quota of {}/min",
            report.replicas, report.quota_per_minute
        ),
        &report.rates,
        report.quota_per_minute as f64 / 60.0,
        report.killed_at_s,
    )?;
    print_table(&report);
    Ok(report)
}

async fn measure(
    cluster: &mut LocalCluster,
    args: &PacingArgs,
    fcm: &FcmMock,
    dispatcher_env: Env,
) -> Result<PacingReport> {
    cluster.set_dispatcher_env(dispatcher_env);
    for _ in 0..args.replicas {
        cluster.start_dispatcher(Platform::Android).await?;
    }
    wait_for_consumers(cluster, args.replicas * BATCH_WORKERS).await?;
    fcm.state.accounting.reset();

    println!(
        "sending to {} Android devices; quota {}/min shared by {} replicas",
        args.audience.devices, args.quota_per_minute, args.replicas
    );
    let sent = Instant::now();
    let id = cluster
        .send(&json!({"topics": ["breaking/uk"], "title": "Pacing", "body": "quota"}))
        .await?;
    let path = format!("/api/v1/notifications/{id}");
    let timeout = Duration::from_secs(args.timeout_secs);
    let mut samples: Vec<(f64, u64)> = vec![(0.0, 0)];
    let mut killed_at = None;
    let mut last_status = Instant::now();
    loop {
        tokio::time::sleep(SAMPLE).await;
        let t = sent.elapsed().as_secs_f64();
        samples.push((t, fcm.state.accounting.counters().accepted));
        if killed_at.is_none() && args.kill_after_secs > 0 && t >= args.kill_after_secs as f64 {
            let victim = cluster.dispatchers.last_mut().context("no dispatcher to kill")?;
            println!("killing {} at {t:.1} s", victim.name);
            victim.kill();
            killed_at = Some(t);
        }
        if last_status.elapsed() >= Duration::from_millis(500) {
            last_status = Instant::now();
            let status = cluster.get(&path).await?;
            let unique = fcm.state.accounting.counters().unique_tokens;
            if !status["completed_at"].is_null() && unique >= args.audience.devices {
                break;
            }
            if sent.elapsed() > timeout {
                bail!("not delivered after {timeout:?}: {status}");
            }
        }
    }
    let duration_s = sent.elapsed().as_secs_f64();
    let stats = fcm.state.accounting.stats();
    let quota_per_s = args.quota_per_minute as f64 / 60.0;
    let ninety = (args.audience.devices as f64 * 0.9) as u64;
    let t_ninety = samples
        .iter()
        .find(|(_, accepted)| *accepted >= ninety)
        .map_or(duration_s, |(t, _)| *t);
    let before_end = killed_at.unwrap_or(t_ninety);
    let takeover_s = killed_at.and_then(|kill| {
        samples
            .iter()
            .filter(|(t, _)| *t >= kill + WINDOW_S)
            .find(|(t, _)| rate_between(&samples, t - WINDOW_S, *t) >= 0.9 * quota_per_s)
            .map(|(t, _)| t - kill)
    });
    let after_takeover = killed_at
        .zip(takeover_s)
        .filter(|(kill, takeover)| kill + takeover < t_ninety)
        .map(|(kill, takeover)| rate_between(&samples, kill + takeover, t_ninety) / quota_per_s);
    let quota_exceeded = stats.by_status.get(&429).copied().unwrap_or(0);
    let requests: u64 = stats.by_status.values().sum();
    Ok(PacingReport {
        audience: args.audience.devices,
        quota_per_minute: args.quota_per_minute,
        replicas: args.replicas,
        before_kill_quota_share: rate_between(&samples, 5.0, before_end) / quota_per_s,
        after_takeover_quota_share: after_takeover,
        killed_at_s: killed_at,
        takeover_s,
        quota_exceeded,
        quota_exceeded_share: quota_exceeded as f64 / requests.max(1) as f64,
        delivered_unique: stats.unique_tokens,
        lost: args.audience.devices.saturating_sub(stats.unique_tokens),
        duplicates: stats.duplicate_pushes,
        duration_s,
        machine: machine(),
        git_commit: git_commit(),
        configuration: json!({
            "batch_workers": BATCH_WORKERS,
            "kill_after_secs": args.kill_after_secs,
            "settings": args.settings.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        }),
        rates: per_second(&samples),
    })
}

/// Waits until RabbitMQ counts `expected` consumers on the Android queue,
/// as every dispatcher reads it for its share.
async fn wait_for_consumers(cluster: &LocalCluster, expected: u32) -> Result<()> {
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        let mut seen = Vec::new();
        for dispatcher in &cluster.dispatchers {
            let addr = dispatcher
                .setting("CLARION_HTTP_ADDR")
                .context("a dispatcher without an address")?;
            let text = http
                .get(format!("http://{addr}/metrics"))
                .send()
                .await?
                .text()
                .await?;
            seen.push(consumers_gauge(&text));
        }
        if seen.iter().all(|&n| n == Some(expected)) {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the dispatchers see {seen:?} consumers, not {expected}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `clarion_amqp_queue_consumers` of the Android deliver queue.
fn consumers_gauge(metrics: &str) -> Option<u32> {
    metrics
        .lines()
        .filter(|line| line.starts_with("clarion_amqp_queue_consumers{") && line.contains("android"))
        .find_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|n| n as u32)
}

/// Pushes accepted per second between `from` and `to` (seconds).
fn rate_between(samples: &[(f64, u64)], from: f64, to: f64) -> f64 {
    let at = |time: f64| {
        samples
            .iter()
            .rev()
            .find(|(t, _)| *t <= time)
            .copied()
            .unwrap_or((0.0, 0))
    };
    let ((t0, a0), (t1, a1)) = (at(from), at(to));
    if t1 <= t0 {
        return 0.0;
    }
    (a1 - a0) as f64 / (t1 - t0)
}

/// The rate over each second of the send.
fn per_second(samples: &[(f64, u64)]) -> Vec<(f64, f64)> {
    let end = samples.last().map_or(0.0, |(t, _)| *t);
    (1..=end.floor() as u64)
        .map(|s| (s as f64, rate_between(samples, s as f64 - 1.0, s as f64)))
        .collect()
}

fn print_table(report: &PacingReport) {
    let share = |v: Option<f64>| v.map_or("—".to_owned(), |v| format!("{:.0}%", v * 100.0));
    println!(
        "\npacing: {} replicas, quota {}/min",
        report.replicas, report.quota_per_minute
    );
    println!(
        "  before the kill     {} of the quota",
        share(Some(report.before_kill_quota_share))
    );
    println!(
        "  takeover            {}",
        report
            .takeover_s
            .map_or("—".to_owned(), |s| format!("{s:.1} s after the kill"))
    );
    println!(
        "  after the takeover  {} of the quota",
        share(report.after_takeover_quota_share)
    );
    println!(
        "  quota exceeded      {} answers ({:.2}% of pushes)",
        report.quota_exceeded,
        report.quota_exceeded_share * 100.0
    );
    println!(
        "  delivered           {} of {} ({} lost, {} duplicates), {:.1} s",
        report.delivered_unique, report.audience, report.lost, report.duplicates, report.duration_s
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_come_from_the_counters_between_two_times() {
        let samples = [(0.0, 0), (1.0, 100), (2.0, 300), (3.0, 600)];
        assert_eq!(rate_between(&samples, 1.0, 3.0), 250.0);
        assert_eq!(rate_between(&samples, 3.0, 3.0), 0.0);
        assert_eq!(per_second(&samples), [(1.0, 100.0), (2.0, 200.0), (3.0, 300.0)]);
    }

    #[test]
    fn the_consumer_gauge_is_read_for_the_android_queue() {
        let text = "clarion_amqp_queue_consumers{queue=\"pacing.deliver.ios\"} 4\n\
                    clarion_amqp_queue_consumers{queue=\"pacing.deliver.android\"} 12\n";
        assert_eq!(consumers_gauge(text), Some(12));
        assert_eq!(consumers_gauge("nothing"), None);
    }
}
