//! `clarion-bench overtake`: does a send wait behind another one?
//!
//! Runs a cluster of release processes against the mocks, once with the
//! job relay's scheduling switched off (everything released at once, as
//! before lanes existed) and once with it on, and in each:
//! - every send alone on an idle cluster (its idle t90 and finish time),
//! - `small-into-big`: a small send 3 s into a big one of the same lane,
//! - `urgent-into-bulk`: a medium urgent send 3 s into a big bulk one,
//! - `two-equal`: two medium sends 3 s apart.
//!
//! Times come from the coordinator's own status of each notification
//! (t90 from the send request; finish = completed_at − created_at). Writes
//! `overtake.json` and prints the table the README shows.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use super::ceiling::{self, CeilingPlan};
use super::run::{Machine, dispatcher_env_for, machine, parse_setting};
use super::{AudienceArgs, git_commit, load_audience, write_json};
use crate::audience::{AudienceShape, Layout};
use crate::local_cluster::{Env, LocalCluster, LocalClusterConfig, delete_namespace};
use crate::mocks::{ApnsMock, ApnsMockConfig, FcmMock, FcmMockConfig, start_on_own_thread};
use crate::seed::connect;

/// The big send's topic (the seeded audience).
const BIG_TOPIC: &str = "breaking/uk";
const MEDIUM_TOPIC: &str = "overtake/medium";
const SMALL_TOPIC: &str = "overtake/small";
/// The relay settings that switch scheduling off: ten minutes ahead and
/// a floor no audience reaches release every job at once.
pub const UNSCHEDULED: [(&str, &str); 2] = [
    ("CLARION_SCHEDULE_AHEAD_MS", "600000"),
    ("CLARION_SCHEDULE_MIN_TOKENS", "1000000000"),
];

#[derive(Debug, Clone, clap::Args)]
pub struct OvertakeArgs {
    /// The big send's audience (`--devices`) and where it lives.
    #[command(flatten)]
    pub audience: AudienceArgs,
    /// Devices of the medium send (urgent into bulk, two equal sends).
    #[arg(long, default_value_t = 1_000_000)]
    pub medium: u64,
    /// Devices of the small send.
    #[arg(long, default_value_t = 1_000)]
    pub small: u64,
    /// Seconds between the first and the second send of a scenario.
    #[arg(long, default_value_t = 3.0)]
    pub delay_secs: f64,
    /// Requests per mock for the ceiling.
    #[arg(long, default_value_t = 300_000)]
    pub ceiling_requests: u64,
    /// Give up (and fail) when a send takes longer than this.
    #[arg(long, default_value_t = 900)]
    pub timeout_secs: u64,
    /// Only the scheduled cluster (skip the comparison without scheduling).
    #[arg(long)]
    pub scheduled_only: bool,
    /// Extra `KEY=VALUE` settings for every Clarion process (repeatable).
    #[arg(long = "set", value_parser = parse_setting)]
    pub settings: Vec<(String, String)>,
    /// Where `overtake.json` is written.
    #[arg(long, default_value = "load-tests/results")]
    pub out_dir: PathBuf,
}

/// One send as the coordinator saw it.
#[derive(Debug, Clone, Serialize)]
pub struct SendFigures {
    pub label: String,
    pub lane: String,
    pub audience: u64,
    pub t90_s: Option<f64>,
    /// From the send request until the notification completed.
    pub finish_s: f64,
    /// Seconds after the scenario's first send that this one was sent.
    pub sent_after_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: String,
    pub sends: Vec<SendFigures>,
    /// From the first send until the last completion.
    pub makespan_s: f64,
    /// The sum of the sends' finish times on an idle cluster.
    pub idle_sum_s: f64,
    pub makespan_ratio: f64,
    /// Each send's t90 over its idle t90.
    pub t90_ratios: Vec<Option<f64>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Mode {
    pub scheduled: bool,
    pub idle: Vec<SendFigures>,
    /// 90in2 efficiency of the big send alone: (0.9 × audience / ceiling) / t90.
    pub big_efficiency: Option<f64>,
    pub scenarios: Vec<Scenario>,
}

#[derive(Debug, Serialize)]
pub struct Targets {
    /// Small send into a big one: t90 ≤ max(2 s, 3 × idle t90).
    pub small_t90_s: Option<f64>,
    pub small_bound_s: Option<f64>,
    /// Urgent into bulk: t90 ≤ 1.25 × idle t90.
    pub urgent_t90_ratio: Option<f64>,
    /// Every scenario: makespan ≤ 1.05 × the idle sum.
    pub worst_makespan_ratio: Option<f64>,
    /// The big send's efficiency with scheduling over without (≥ 0.97).
    pub efficiency_ratio: Option<f64>,
    pub met: bool,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub ceiling_per_s: f64,
    pub modes: Vec<Mode>,
    pub targets: Targets,
    pub machine: Machine,
    pub configuration: Value,
    pub git_commit: Option<String>,
}

pub async fn run(args: OvertakeArgs) -> Result<Report> {
    if args.small >= args.medium || args.medium >= args.audience.devices {
        bail!("expected --small < --medium < --devices");
    }
    let shape = AudienceShape {
        ios_percent: 50,
        dead_percent: 0,
        layout: Layout::Single,
    };
    load_audience(&args.audience, shape).await?;
    add_topic(&args.audience.database_url, MEDIUM_TOPIC, args.medium).await?;
    add_topic(&args.audience.database_url, SMALL_TOPIC, args.small).await?;

    let work = std::env::temp_dir().join(format!("clarion-overtake-{}", std::process::id()));
    let apns_config = ApnsMockConfig::local(work.clone());
    let apns = start_on_own_thread("mock-apns", || ApnsMock::start(apns_config)).await?;
    let fcm_config = FcmMockConfig::local(work.clone());
    let fcm = start_on_own_thread("mock-fcm", || FcmMock::start(fcm_config)).await?;
    println!(
        "measuring the ceiling ({} requests per mock)",
        args.ceiling_requests
    );
    let plan = CeilingPlan {
        requests: args.ceiling_requests,
        connections: 2,
        in_flight: 1000,
    };
    let (ceiling_apns, ceiling_fcm) = ceiling::measure(&apns, &fcm, plan).await?;
    let ceiling_per_s = ceiling_apns.per_s + ceiling_fcm.per_s;
    println!("ceiling: {ceiling_per_s:.0} pushes/s");

    let mut dispatcher_env = dispatcher_env_for(&apns, &fcm, &work)?;
    dispatcher_env.extend(args.settings.iter().cloned());

    let mut modes = Vec::new();
    let schedules: &[bool] = if args.scheduled_only {
        &[true]
    } else {
        &[false, true]
    };
    for &scheduled in schedules {
        let mut coordinator_env: Env = args.settings.clone();
        if !scheduled {
            coordinator_env.extend(UNSCHEDULED.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        }
        let namespace = format!("overtake-{}-{scheduled}", std::process::id());
        let config = LocalClusterConfig {
            database_url: args.audience.database_url.clone(),
            amqp_url: args.audience.amqp_url.clone(),
            namespace: namespace.clone(),
            harvesters: 1,
            coordinator_env,
            harvester_env: args.settings.clone(),
            dispatcher_env: dispatcher_env.clone(),
            log_dir: std::env::current_exe()?
                .parent()
                .context("the executable has no directory")?
                .join("bench-logs"),
        };
        println!("\n== scheduling {}", if scheduled { "on" } else { "off" });
        let mut cluster = LocalCluster::start(&config).await?;
        let outcome = run_mode(&cluster, &args, scheduled, ceiling_per_s).await;
        cluster.stop();
        delete_namespace(&args.audience.amqp_url, &namespace).await;
        modes.push(outcome?);
    }
    let _ = std::fs::remove_dir_all(&work);

    let targets = targets(&modes);
    let report = Report {
        ceiling_per_s,
        modes,
        targets,
        machine: machine(),
        configuration: json!({
            "big": args.audience.devices,
            "medium": args.medium,
            "small": args.small,
            "delay_s": args.delay_secs,
            "harvesters": 1,
            "dispatchers_per_platform": 1,
            "settings": args.settings.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        }),
        git_commit: git_commit(),
    };
    std::fs::create_dir_all(&args.out_dir)?;
    write_json(&args.out_dir.join("overtake.json"), &report)?;
    print_table(&report);
    Ok(report)
}

/// Registers the first `devices` tokens of the big topic on `topic` too.
async fn add_topic(database_url: &str, topic: &str, devices: u64) -> Result<()> {
    let client = connect(database_url).await?;
    let existing: i64 = client
        .query_one("SELECT count(*) FROM registrations WHERE topic = $1", &[&topic])
        .await?
        .get(0);
    if existing == devices as i64 {
        return Ok(());
    }
    client
        .execute("DELETE FROM registrations WHERE topic = $1", &[&topic])
        .await?;
    client
        .execute(
            "INSERT INTO registrations (topic, shard, token, platform, apns_environment)
             SELECT $1, shard, token, platform, apns_environment FROM registrations
              WHERE topic = $2 ORDER BY token LIMIT $3",
            &[&topic, &BIG_TOPIC, &(devices as i64)],
        )
        .await
        .with_context(|| format!("adding topic {topic}"))?;
    println!("topic {topic}: {devices} devices");
    Ok(())
}

/// What one mode sends.
struct Send {
    label: &'static str,
    topic: &'static str,
    lane: &'static str,
}

const BIG: Send = Send {
    label: "big",
    topic: BIG_TOPIC,
    lane: "standard",
};
const BIG_BULK: Send = Send {
    label: "big bulk",
    topic: BIG_TOPIC,
    lane: "bulk",
};
const MEDIUM: Send = Send {
    label: "medium",
    topic: MEDIUM_TOPIC,
    lane: "standard",
};
const MEDIUM_URGENT: Send = Send {
    label: "medium urgent",
    topic: MEDIUM_TOPIC,
    lane: "urgent",
};
const SMALL: Send = Send {
    label: "small",
    topic: SMALL_TOPIC,
    lane: "standard",
};

async fn run_mode(
    cluster: &LocalCluster,
    args: &OvertakeArgs,
    scheduled: bool,
    ceiling_per_s: f64,
) -> Result<Mode> {
    let timeout = Duration::from_secs(args.timeout_secs);
    for topic in [BIG_TOPIC, MEDIUM_TOPIC, SMALL_TOPIC] {
        let size = cluster.get(&format!("/api/v1/topics/{topic}")).await?;
        println!("topic {topic}: {} subscribers", size["subscribers"]);
    }
    let mut idle = Vec::new();
    for send in [&BIG, &MEDIUM_URGENT, &SMALL] {
        let figures = scenario(cluster, &[send], 0.0, timeout).await?;
        idle.extend(figures);
    }
    let idle_of = |label: &str| -> Option<&SendFigures> {
        let base = label.split(' ').next().unwrap_or(label);
        idle.iter().find(|f| f.label.split(' ').next() == Some(base))
    };
    let big_efficiency =
        idle_of("big").and_then(|f| f.t90_s.map(|t90| (0.9 * f.audience as f64 / ceiling_per_s) / t90));

    let mut scenarios = Vec::new();
    for (name, sends) in [
        ("small-into-big", [&BIG, &SMALL]),
        ("urgent-into-bulk", [&BIG_BULK, &MEDIUM_URGENT]),
        ("two-equal", [&MEDIUM, &MEDIUM]),
    ] {
        if !scheduled && name != "small-into-big" {
            // Without scheduling only the first shows what lanes fix.
            continue;
        }
        let figures = scenario(cluster, &sends, args.delay_secs, timeout).await?;
        let makespan_s = figures
            .iter()
            .map(|f| f.sent_after_s + f.finish_s)
            .fold(0.0, f64::max);
        let idle_sum_s: f64 = figures
            .iter()
            .filter_map(|f| idle_of(&f.label))
            .map(|f| f.finish_s)
            .sum();
        let t90_ratios = figures
            .iter()
            .map(|f| {
                let idle_t90 = idle_of(&f.label)?.t90_s?;
                Some(f.t90_s? / idle_t90)
            })
            .collect();
        scenarios.push(Scenario {
            name: name.to_owned(),
            sends: figures,
            makespan_s,
            idle_sum_s,
            makespan_ratio: makespan_s / idle_sum_s,
            t90_ratios,
        });
    }
    Ok(Mode {
        scheduled,
        idle,
        big_efficiency,
        scenarios,
    })
}

/// Sends `sends`, `delay_s` apart, and waits for all to complete.
async fn scenario(
    cluster: &LocalCluster,
    sends: &[&Send],
    delay_s: f64,
    timeout: Duration,
) -> Result<Vec<SendFigures>> {
    let started = Instant::now();
    let mut ids = Vec::new();
    for (i, send) in sends.iter().enumerate() {
        let at = Duration::from_secs_f64(delay_s * i as f64);
        tokio::time::sleep(at.saturating_sub(started.elapsed())).await;
        let sent_after_s = started.elapsed().as_secs_f64();
        let id = cluster
            .send(&json!({
                "topics": [send.topic],
                "title": "Overtake",
                "body": send.label,
                "lane": send.lane,
            }))
            .await?;
        ids.push((id, sent_after_s));
    }
    let mut figures = Vec::new();
    for ((id, sent_after_s), send) in ids.into_iter().zip(sends) {
        let status = wait_for_completion(cluster, &id, timeout).await?;
        let created: DateTime<Utc> = serde_json::from_value(status["created_at"].clone())?;
        let completed: DateTime<Utc> = serde_json::from_value(status["completed_at"].clone())?;
        let f = SendFigures {
            label: send.label.to_owned(),
            lane: send.lane.to_owned(),
            audience: status["audience"]["total"].as_u64().unwrap_or(0),
            t90_s: status["timings"]["t90_ms"].as_f64().map(|ms| ms / 1000.0),
            finish_s: (completed - created).num_milliseconds() as f64 / 1000.0,
            sent_after_s,
        };
        println!(
            "  {:<14} {:>9} devices  t90 {:>7}  finished after {:>6.2} s",
            f.label,
            f.audience,
            f.t90_s.map_or("-".into(), |t| format!("{t:.2} s")),
            f.finish_s
        );
        figures.push(f);
    }
    Ok(figures)
}

async fn wait_for_completion(cluster: &LocalCluster, id: &str, timeout: Duration) -> Result<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let status = cluster.get(&format!("/api/v1/notifications/{id}")).await?;
        if !status["completed_at"].is_null() {
            if status["status"] != "complete" {
                bail!("notification {id} ended {}: {status}", status["status"]);
            }
            return Ok(status);
        }
        if Instant::now() > deadline {
            bail!("notification {id} did not complete in {timeout:?}: {status}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn targets(modes: &[Mode]) -> Targets {
    let on = modes.iter().find(|m| m.scheduled);
    let off = modes.iter().find(|m| !m.scheduled);
    let scenario = |name: &str| on.and_then(|m| m.scenarios.iter().find(|s| s.name == name));
    let small = scenario("small-into-big").and_then(|s| s.sends.iter().find(|f| f.label == "small"));
    let small_idle = on.and_then(|m| m.idle.iter().find(|f| f.label == "small"));
    let small_t90_s = small.and_then(|f| f.t90_s);
    let small_bound_s = small_idle.and_then(|f| f.t90_s).map(|t| (3.0 * t).max(2.0));
    let urgent_t90_ratio = scenario("urgent-into-bulk").and_then(|s| s.t90_ratios.get(1).copied().flatten());
    let worst_makespan_ratio = on.and_then(|m| m.scenarios.iter().map(|s| s.makespan_ratio).reduce(f64::max));
    let efficiency_ratio = match (
        on.and_then(|m| m.big_efficiency),
        off.and_then(|m| m.big_efficiency),
    ) {
        (Some(on), Some(off)) => Some(on / off),
        _ => None,
    };
    let met = matches!((small_t90_s, small_bound_s), (Some(t), Some(b)) if t <= b)
        && urgent_t90_ratio.is_some_and(|r| r <= 1.25)
        && worst_makespan_ratio.is_some_and(|r| r <= 1.05)
        && efficiency_ratio.is_none_or(|r| r >= 0.97);
    Targets {
        small_t90_s,
        small_bound_s,
        urgent_t90_ratio,
        worst_makespan_ratio,
        efficiency_ratio,
        met,
    }
}

fn print_table(report: &Report) {
    println!("\n| scheduling | scenario | send | lane | devices | sent at | t90 | t90 / idle | finish |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let secs = |t: Option<f64>| t.map_or("-".into(), |t| format!("{t:.2} s"));
    for mode in &report.modes {
        let on = if mode.scheduled { "on" } else { "off" };
        for f in &mode.idle {
            println!(
                "| {on} | idle | {} | {} | {} | - | {} | 1.00 | {:.2} s |",
                f.label,
                f.lane,
                f.audience,
                secs(f.t90_s),
                f.finish_s
            );
        }
        for s in &mode.scenarios {
            for (f, ratio) in s.sends.iter().zip(&s.t90_ratios) {
                println!(
                    "| {on} | {} | {} | {} | {} | {:.1} s | {} | {} | {:.2} s |",
                    s.name,
                    f.label,
                    f.lane,
                    f.audience,
                    f.sent_after_s,
                    secs(f.t90_s),
                    ratio.map_or("-".into(), |r| format!("{r:.2}")),
                    f.finish_s
                );
            }
        }
    }
    let t = &report.targets;
    println!(
        "\nsmall into big: t90 {} (bound {}); urgent into bulk: t90 {}× idle (bound 1.25); \
         worst makespan {}× the idle sum (bound 1.05); big send efficiency with / without scheduling {} (bound 0.97): {}",
        secs(t.small_t90_s),
        secs(t.small_bound_s),
        t.urgent_t90_ratio.map_or("-".into(), |r| format!("{r:.2}")),
        t.worst_makespan_ratio.map_or("-".into(), |r| format!("{r:.2}")),
        t.efficiency_ratio.map_or("-".into(), |r| format!("{r:.3}")),
        if t.met {
            "all targets met"
        } else {
            "TARGETS MISSED"
        }
    );
}
