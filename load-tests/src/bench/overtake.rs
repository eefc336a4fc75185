//! `clarion-bench overtake`: does a send wait behind another one?
//!
//! Runs a cluster of release processes against the mocks with the job
//! relay's scheduling switched off (everything released at once, as before
//! lanes existed) and on, switching by restarting the coordinator, so both
//! are measured on the same warm cluster:
//! - a warm-up send (not counted);
//! - every send alone on the idle cluster, `--idle-rounds` times, off and
//!   on in turn (the idle figures are the medians: one send on a shared
//!   2-core machine varies by more than the 3% the efficiency target asks);
//! - `small-into-big`: a small send 3 s into a big one of the same lane
//!   (off and on);
//! - `urgent-into-bulk`: a medium urgent send 3 s into a big bulk one (on);
//! - `two-equal`: two medium sends 3 s apart (on).
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
use super::run::{Machine, UNSCHEDULED, machine, parse_setting};
use super::{AudienceArgs, git_commit, load_audience, write_json};
use crate::audience::{AudienceShape, Layout};
use crate::local_cluster::{LocalCluster, Member, delete_namespace};
use crate::seed::connect;

/// The big send's topic (the seeded audience).
const BIG_TOPIC: &str = "breaking/uk";
const MEDIUM_TOPIC: &str = "overtake/medium";
const SMALL_TOPIC: &str = "overtake/small";
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
    /// Times each send is measured alone, per mode (the medians count).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub idle_rounds: u32,
    /// Only these scenarios (repeatable; default all): `small-into-big`,
    /// `urgent-into-bulk`, `two-equal`. A partial run never meets the targets.
    #[arg(long = "scenario", value_parser = ["small-into-big", "urgent-into-bulk", "two-equal"])]
    pub scenarios: Vec<String>,
    /// Extra `KEY=VALUE` settings for every Clarion process (repeatable).
    #[arg(long = "set", value_parser = parse_setting)]
    pub settings: Vec<(String, String)>,
    /// Where `overtake.json` is written.
    #[arg(long, default_value_os_t = super::default_results_dir())]
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
    /// Each send alone: the median t90 and finish time of its rounds.
    pub idle: Vec<SendFigures>,
    /// Every idle round, in the order measured.
    pub idle_rounds: Vec<SendFigures>,
    /// 90in2 efficiency of the big send alone: (0.9 × audience / ceiling) / t90.
    pub big_efficiency: Option<f64>,
    pub scenarios: Vec<Scenario>,
}

#[derive(Debug, Serialize)]
pub struct Targets {
    /// Small send into a big one: t90 ≤ max(2 s, 3 × idle t90).
    pub small_t90_s: Option<f64>,
    pub small_bound_s: Option<f64>,
    pub small_met: bool,
    /// Urgent into bulk: t90 ≤ 1.25 × idle t90.
    pub urgent_t90_ratio: Option<f64>,
    pub urgent_bound: f64,
    pub urgent_met: bool,
    /// Every scenario: makespan ≤ 1.05 × the idle sum (it cannot hold when
    /// a send finishes sooner than `--delay-secs`: the cluster idles).
    pub worst_makespan_ratio: Option<f64>,
    pub worst_makespan_scenario: Option<String>,
    pub makespan_bound: f64,
    pub makespan_met: bool,
    /// The big send's efficiency with scheduling over without (≥ 0.97).
    pub efficiency_ratio: Option<f64>,
    pub efficiency_bound: f64,
    pub efficiency_met: bool,
    pub met: bool,
}

/// The targets of the issue.
const URGENT_BOUND: f64 = 1.25;
const MAKESPAN_BOUND: f64 = 1.05;
const EFFICIENCY_BOUND: f64 = 0.97;

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
        web_percent: 0,
        ios_percent: 50,
        dead_percent: 0,
        layout: Layout::Single,
        locales: 0,
    };
    load_audience(&args.audience, shape, 1).await?;
    add_topic(&args.audience.database_url, MEDIUM_TOPIC, args.medium).await?;
    add_topic(&args.audience.database_url, SMALL_TOPIC, args.small).await?;
    // Rows inserted since the last vacuum are read from the heap, not the
    // index alone: a topic made last would harvest several times slower.
    connect(&args.audience.database_url)
        .await?
        .batch_execute("VACUUM (ANALYZE) registrations")
        .await?;

    let work = std::env::temp_dir().join(format!("clarion-overtake-{}", std::process::id()));
    let mocks = super::start_mocks(&work).await?;
    let (apns, fcm) = (&mocks.apns, &mocks.fcm);
    println!(
        "measuring the ceiling ({} requests per mock)",
        args.ceiling_requests
    );
    let plan = CeilingPlan {
        requests: args.ceiling_requests,
        connections: 2,
        in_flight: 1000,
    };
    let (ceiling_apns, ceiling_fcm) = ceiling::measure(apns, fcm, plan).await?;
    let ceiling_per_s = ceiling_apns.per_s + ceiling_fcm.per_s;
    println!("ceiling: {ceiling_per_s:.0} pushes/s");

    let mut dispatcher_env = mocks.dispatcher_env(&work)?;
    dispatcher_env.extend(args.settings.iter().cloned());
    let namespace = format!("overtake-{}", std::process::id());
    let config = super::cluster_config(
        &args.audience,
        &args.settings,
        dispatcher_env,
        &namespace,
        super::bench_log_dir()?,
    );
    let mut cluster = crate::bench::start_cluster(&config).await?;
    let outcome = run_modes(&mut cluster, &args, ceiling_per_s).await;
    cluster.stop();
    delete_namespace(&args.audience.amqp_url, &namespace).await;
    let modes = outcome?;
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
            "idle_rounds": args.idle_rounds,
            "settings": args.settings.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        }),
        git_commit: git_commit(),
    };
    std::fs::create_dir_all(&args.out_dir)?;
    write_json(&args.out_dir.join("overtake.json"), &report)?;
    print_table(&report);
    Ok(report)
}

/// Registers `devices` tokens of the big topic on `topic` too, picked by a
/// hash of the token so that they have the big topic's platform mix and
/// spread over every shard (the first tokens in token order would all be
/// of one platform: APNs and FCM tokens look different).
async fn add_topic(database_url: &str, topic: &str, devices: u64) -> Result<()> {
    let client = connect(database_url).await?;
    let count = |sql: &'static str| {
        let client = &client;
        async move {
            let row = client.query_one(sql, &[&topic]).await?;
            anyhow::Ok(row.get::<_, i64>(0).max(0) as u64)
        }
    };
    let all = "SELECT count(*) FROM registrations WHERE app = 'default' AND topic = $1";
    let of_ios =
        "SELECT count(*) FROM registrations WHERE app = 'default' AND topic = $1 AND platform = 'ios'";
    let (existing, ios) = (count(all).await?, count(of_ios).await?);
    // Kept when it is already there with both platforms (a topic made
    // again costs WAL, checkpoints and autovacuum during the measurement).
    if existing == devices && ios * 3 >= devices && ios * 3 <= devices * 2 {
        println!("topic {topic}: {devices} devices, {ios} of them iOS (kept)");
        return Ok(());
    }
    client
        .execute(
            "DELETE FROM registrations WHERE app = 'default' AND topic = $1",
            &[&topic],
        )
        .await?;
    client
        .execute(
            "INSERT INTO registrations (topic, shard, token, platform, apns_environment)
             SELECT $1, shard, token, platform, apns_environment FROM registrations
              WHERE app = 'default' AND topic = $2 ORDER BY md5(token) LIMIT $3",
            &[&topic, &BIG_TOPIC, &(devices as i64)],
        )
        .await
        .with_context(|| format!("adding topic {topic}"))?;
    println!(
        "topic {topic}: {devices} devices, {} of them iOS",
        count(of_ios).await?
    );
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

/// Restarts the coordinator with the job relay's scheduling on or off
/// (`--set` values of the scheduling settings apply when on).
async fn switch_scheduling(cluster: &mut LocalCluster, args: &OvertakeArgs, scheduled: bool) -> Result<()> {
    for (key, _) in UNSCHEDULED {
        cluster.coordinator.unset(key);
        if scheduled {
            for (_, value) in args.settings.iter().filter(|(k, _)| k == key) {
                cluster.coordinator.set(key, value);
            }
        } else {
            let value = UNSCHEDULED
                .iter()
                .find(|(k, _)| *k == key)
                .map_or("", |(_, v)| *v);
            cluster.coordinator.set(key, value);
        }
    }
    println!("\n== scheduling {}", if scheduled { "on" } else { "off" });
    cluster.restart(Member::Coordinator).await?;
    // A running coordinator knows its topics' sizes (a cold one plans 64
    // jobs for a topic it has not counted yet): ask, as before every send.
    for topic in [BIG_TOPIC, MEDIUM_TOPIC, SMALL_TOPIC] {
        cluster.get(&format!("/api/v1/topics/{topic}")).await?;
    }
    Ok(())
}

async fn run_modes(cluster: &mut LocalCluster, args: &OvertakeArgs, ceiling_per_s: f64) -> Result<Vec<Mode>> {
    let timeout = Duration::from_secs(args.timeout_secs);
    for topic in [BIG_TOPIC, MEDIUM_TOPIC, SMALL_TOPIC] {
        let size = cluster.get(&format!("/api/v1/topics/{topic}")).await?;
        println!("topic {topic}: {} subscribers", size["subscribers"]);
    }
    println!("warming up (not counted)");
    scenario(cluster, &[&MEDIUM], 0.0, timeout).await?;

    let schedules: &[bool] = if args.scheduled_only {
        &[true]
    } else {
        &[false, true]
    };
    let mut modes: Vec<Mode> = schedules
        .iter()
        .map(|&scheduled| Mode {
            scheduled,
            idle: Vec::new(),
            idle_rounds: Vec::new(),
            big_efficiency: None,
            scenarios: Vec::new(),
        })
        .collect();
    for round in 1..=args.idle_rounds {
        for mode in modes.iter_mut() {
            switch_scheduling(cluster, args, mode.scheduled).await?;
            println!("idle round {round}");
            for send in [&BIG, &MEDIUM_URGENT, &SMALL] {
                mode.idle_rounds
                    .extend(scenario(cluster, &[send], 0.0, timeout).await?);
            }
        }
    }
    for mode in modes.iter_mut() {
        mode.idle = [&BIG, &MEDIUM_URGENT, &SMALL]
            .iter()
            .filter_map(|send| median_of(&mode.idle_rounds, send.label))
            .collect();
        mode.big_efficiency = mode
            .idle
            .iter()
            .find(|f| f.label == BIG.label)
            .and_then(|f| f.t90_s.map(|t90| (0.9 * f.audience as f64 / ceiling_per_s) / t90));
        switch_scheduling(cluster, args, mode.scheduled).await?;
        mode.scenarios = run_scenarios(cluster, args, mode).await?;
    }
    Ok(modes)
}

/// The send labelled `label` with the median t90 and finish time of its rounds.
fn median_of(rounds: &[SendFigures], label: &str) -> Option<SendFigures> {
    let of_label: Vec<&SendFigures> = rounds.iter().filter(|f| f.label == label).collect();
    let median = |values: Vec<f64>| -> Option<f64> {
        let mut values = values;
        values.sort_by(f64::total_cmp);
        let n = values.len();
        match n {
            0 => None,
            _ if n % 2 == 1 => Some(values[n / 2]),
            _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
        }
    };
    let first = *of_label.first()?;
    Some(SendFigures {
        t90_s: median(of_label.iter().filter_map(|f| f.t90_s).collect()),
        finish_s: median(of_label.iter().map(|f| f.finish_s).collect())?,
        ..first.clone()
    })
}

async fn run_scenarios(cluster: &LocalCluster, args: &OvertakeArgs, mode: &Mode) -> Result<Vec<Scenario>> {
    let timeout = Duration::from_secs(args.timeout_secs);
    let idle_of = |label: &str| -> Option<&SendFigures> {
        let base = label.split(' ').next().unwrap_or(label);
        mode.idle.iter().find(|f| f.label.split(' ').next() == Some(base))
    };
    let mut scenarios = Vec::new();
    for (name, sends) in [
        ("small-into-big", [&BIG, &SMALL]),
        ("urgent-into-bulk", [&BIG_BULK, &MEDIUM_URGENT]),
        ("two-equal", [&MEDIUM, &MEDIUM]),
    ] {
        if !mode.scheduled && name != "small-into-big" {
            // Without scheduling only the first shows what lanes fix.
            continue;
        }
        if !args.scenarios.is_empty() && !args.scenarios.iter().any(|s| s == name) {
            continue;
        }
        println!("scenario {name}");
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
    Ok(scenarios)
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
    let worst = on.and_then(|m| {
        m.scenarios
            .iter()
            .max_by(|a, b| a.makespan_ratio.total_cmp(&b.makespan_ratio))
    });
    let efficiency_ratio = match (
        on.and_then(|m| m.big_efficiency),
        off.and_then(|m| m.big_efficiency),
    ) {
        (Some(on), Some(off)) => Some(on / off),
        _ => None,
    };
    let small_met = matches!((small_t90_s, small_bound_s), (Some(t), Some(b)) if t <= b);
    let urgent_met = urgent_t90_ratio.is_some_and(|r| r <= URGENT_BOUND);
    let makespan_met = worst.is_some_and(|s| s.makespan_ratio <= MAKESPAN_BOUND);
    let efficiency_met = efficiency_ratio.is_none_or(|r| r >= EFFICIENCY_BOUND);
    Targets {
        small_t90_s,
        small_bound_s,
        small_met,
        urgent_t90_ratio,
        urgent_bound: URGENT_BOUND,
        urgent_met,
        worst_makespan_ratio: worst.map(|s| s.makespan_ratio),
        worst_makespan_scenario: worst.map(|s| s.name.clone()),
        makespan_bound: MAKESPAN_BOUND,
        makespan_met,
        efficiency_ratio,
        efficiency_bound: EFFICIENCY_BOUND,
        efficiency_met,
        met: small_met && urgent_met && makespan_met && efficiency_met,
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
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    println!(
        "\nsmall into big: t90 {} (bound {}): {}",
        secs(t.small_t90_s),
        secs(t.small_bound_s),
        verdict(t.small_met)
    );
    println!(
        "urgent into bulk: t90 {}× idle (bound {URGENT_BOUND}): {}",
        t.urgent_t90_ratio.map_or("-".into(), |r| format!("{r:.2}")),
        verdict(t.urgent_met)
    );
    println!(
        "worst makespan: {}× the idle sum, in {} (bound {MAKESPAN_BOUND}): {}",
        t.worst_makespan_ratio.map_or("-".into(), |r| format!("{r:.2}")),
        t.worst_makespan_scenario.as_deref().unwrap_or("-"),
        verdict(t.makespan_met)
    );
    println!(
        "big send's efficiency with / without scheduling: {} (bound {EFFICIENCY_BOUND}): {}",
        t.efficiency_ratio.map_or("-".into(), |r| format!("{r:.3}")),
        verdict(t.efficiency_met)
    );
    println!(
        "{}",
        if t.met {
            "all targets met"
        } else {
            "TARGETS MISSED"
        }
    );
}
