//! `clarion-bench storm`: the storm after an alert. Seeds the audience,
//! registers a share of it on the send's topic, runs the cluster against
//! the mocks, then measures the send alone, each load alone (closed loop:
//! the most one coordinator serves) and every load together at its target
//! rate (open loop) while the same send runs again; writes `storm.json`,
//! `storm.svg` and prints the README's table.

mod connection;
mod cpu;
mod driver;
mod load;
mod recorder;
mod report;
mod requests;
mod schedule;
mod status_metric;
mod tokens;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;

use super::plot::{self, Timeline};
use super::run::{follow, machine, parse_setting, time_to};
use super::{AudienceArgs, default_results_dir, git_commit, load_audience, start_mocks, write_json};
use crate::audience::{AudienceShape, Layout};
use crate::local_cluster::{LocalCluster, delete_namespace};
use crate::mocks::{ApnsMock, FcmMock};
use cpu::{Cpu, PeakMemory};
use driver::{Phase, drive};
use load::Load;
use recorder::LoadFigures;
use report::{
    LoadResult, SendFigures, StormReport, cpu_bound_growth, markdown_table, storm_cpu_share, t90_growth,
};
use requests::{Requests, Subject};
use schedule::Pace;
use tokens::{PoolSizes, SEND_TOPIC, TokenPools};

/// The topic the seeder fills (every device follows it).
const SEEDED_TOPIC: &str = "breaking/uk";
/// Each request's deadline.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Quiet time between phases, so one phase's tail (group commits, the
/// status cache) does not run into the next one's figures.
const BETWEEN_PHASES: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, clap::Args)]
#[command(mut_arg("devices", |arg| arg.default_value("2000000")))]
pub struct StormArgs {
    #[command(flatten)]
    pub audience: AudienceArgs,
    /// Devices of the send's audience: the seeded devices of the lowest
    /// shards, registered on `storm/send` too and reporting receipts.
    #[arg(long, default_value_t = 1_000_000)]
    pub send_devices: u64,
    /// Seconds of each load alone.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Connections of each load (as wrk's `-c`).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub connections: u16,
    /// The loads to measure, comma-separated (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub loads: Option<Vec<Load>>,
    /// Skip the loads alone (only the sends).
    #[arg(long)]
    pub skip_alone: bool,
    /// Skip the sends with the pollers and with the storm (only the send
    /// alone and the loads alone).
    #[arg(long)]
    pub skip_storm: bool,
    /// Registration writes per second during the send.
    #[arg(long, default_value_t = 5_000.0)]
    pub write_rate: f64,
    /// Registration reads per second during the send (0: not in the storm,
    /// which is the issue's: writes and batched receipts).
    #[arg(long, default_value_t = 0.0)]
    pub read_rate: f64,
    /// Receipts per second during the send, in batches.
    #[arg(long, default_value_t = 20_000.0)]
    pub receipt_rate: f64,
    /// Receipts per request of the batched receipts.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=500))]
    pub receipts_per_request: u16,
    /// Receipts per second during the send, one a request (0: not in the
    /// storm).
    #[arg(long, default_value_t = 0.0)]
    pub single_receipt_rate: f64,
    /// Dashboards polling the send: each asks its status and its curve
    /// once a second, with `If-None-Match`; alone, then during a send of
    /// their own (not during the storm's).
    #[arg(long, default_value_t = 1_000)]
    pub pollers: usize,
    /// Registered tokens the reads pick from at random.
    #[arg(long, default_value_t = 20_000)]
    pub read_tokens: usize,
    /// Devices of the send's audience the receipts cycle through
    /// (`received`, then `opened`, then replays).
    #[arg(long, default_value_t = 500_000)]
    pub receipt_tokens: usize,
    /// Name of the result files.
    #[arg(long, default_value = "storm")]
    pub name: String,
    /// Give up (and fail) when a send takes longer than this.
    #[arg(long, default_value_t = 900)]
    pub timeout_secs: u64,
    /// Extra `KEY=VALUE` settings for every Clarion process (repeatable).
    #[arg(long = "set", value_parser = parse_setting)]
    pub settings: Vec<(String, String)>,
    /// Where `<name>.json` and `<name>.svg` are written.
    #[arg(long, default_value_os_t = default_results_dir())]
    pub out_dir: PathBuf,
}

impl StormArgs {
    fn loads(&self) -> Vec<Load> {
        let mut loads = self.loads.clone().unwrap_or_else(|| Load::ALL.to_vec());
        loads.sort_unstable();
        loads.dedup();
        loads
    }

    /// How `load` runs alone: as fast as it is served, except the pollers,
    /// whose rate is what they are.
    fn alone(&self, load: Load) -> Pace {
        match load {
            Load::Pollers => self.pollers_pace(),
            _ => Pace::ClosedLoop,
        }
    }

    /// How `load` runs during the send: at its target, or not at all.
    fn during_send(&self, load: Load) -> Option<Pace> {
        let per_s = match load {
            Load::RegistrationWrites => self.write_rate,
            Load::RegistrationReads => self.read_rate,
            Load::ReceiptsBatched => self.receipt_rate / f64::from(self.receipts_per_request),
            Load::ReceiptsSingle => self.single_receipt_rate,
            // The pollers have a send of their own (their target is apart);
            // the ceiling is measured alone: during a send it would only
            // take the send's CPU.
            Load::Pollers | Load::Healthz => return None,
        };
        (per_s > 0.0).then_some(Pace::OpenLoop { per_s })
    }

    fn pollers_pace(&self) -> Pace {
        Pace::OpenLoop {
            per_s: 2.0 * self.pollers as f64,
        }
    }
}

pub async fn run(args: StormArgs) -> Result<StormReport> {
    let shape = AudienceShape {
        web_percent: 0,
        ios_percent: 50,
        dead_percent: 0,
        layout: Layout::Single,
        locales: 0,
    };
    load_audience(&args.audience, shape, 1).await?;
    let cutoff = tokens::shard_cutoff(args.audience.devices, args.send_devices);
    let send_audience = tokens::prepare_send_topic(&args.audience.database_url, SEEDED_TOPIC, cutoff).await?;
    let sizes = PoolSizes {
        reads: args.read_tokens,
        changed: 20_000,
        receipts: args.receipt_tokens,
    };
    let devices = args.audience.devices;
    let pools = tokio::task::spawn_blocking(move || tokens::pools(devices, shape, cutoff, sizes)).await?;
    println!(
        "token pools: {} to read, {} to change, {} for receipts",
        pools.reads.len(),
        pools.changed.len(),
        pools.receipts.len()
    );

    let work = std::env::temp_dir().join(format!("clarion-bench-storm-{}", std::process::id()));
    let mocks = start_mocks(&work).await?;
    let (apns, fcm) = (&mocks.apns, &mocks.fcm);
    let mut dispatcher_env = mocks.dispatcher_env(&work)?;
    dispatcher_env.extend(args.settings.iter().cloned());
    let namespace = format!("bench-storm-{}", std::process::id());
    let config = super::cluster_config(
        &args.audience,
        &args.settings,
        dispatcher_env,
        &namespace,
        super::bench_log_dir()?.join(&args.name),
    );
    let mut cluster = crate::bench::start_cluster(&config).await?;
    let measured = measure(&cluster, &args, apns, fcm, Arc::new(pools)).await;
    cluster.stop();
    delete_namespace(&args.audience.amqp_url, &namespace).await;
    let _ = std::fs::remove_dir_all(&work);
    match tokens::clean_up(&args.audience.database_url).await {
        Ok(deleted) => println!("deleted the {deleted} registrations the writes made"),
        Err(err) => eprintln!("could not delete the writes' registrations: {err:#}"),
    }
    let measured = measured?;

    let share = measured
        .with_storm
        .as_ref()
        .and_then(|storm| storm_cpu_share(&measured.alone_send.cpu, &storm.cpu));
    let report = StormReport {
        name: args.name.clone(),
        devices,
        send_audience,
        connections: usize::from(args.connections),
        seconds_per_phase: args.seconds,
        t90_growth: measured
            .with_storm
            .as_ref()
            .and_then(|storm| t90_growth(&measured.alone_send, storm)),
        storm_cpu_share: share,
        cpu_bound_growth: share.and_then(cpu_bound_growth),
        generator_cpu_share: measured.with_storm.as_ref().and_then(|storm| {
            let total = storm.cpu.total_s();
            (total > 0.0).then(|| storm.cpu.generator_s / total)
        }),
        t90_growth_with_pollers: measured
            .with_pollers
            .as_ref()
            .and_then(|pollers| t90_growth(&measured.alone_send, pollers)),
        send_with_pollers: measured.with_pollers,
        during_pollers_send: measured.during_pollers_send,
        send_alone: measured.alone_send,
        send_with_storm: measured.with_storm,
        alone: measured.alone,
        during_send: measured.during_send,
        status_metric: measured.status_metric,
        machine: machine(),
        configuration: json!({
            "harvesters": 1,
            "dispatchers_per_platform": 1,
            "loads": args.loads().iter().map(|load| load.name()).collect::<Vec<_>>(),
            "during_send_per_s": {
                "registration_writes": args.write_rate,
                "registration_reads": args.read_rate,
                "receipts_batched": args.receipt_rate,
                "receipts_per_request": args.receipts_per_request,
                "receipts_single": args.single_receipt_rate,
                "pollers": args.pollers,
            },
            "read_tokens": args.read_tokens,
            "receipt_tokens": args.receipt_tokens,
            "request_deadline_s": REQUEST_DEADLINE.as_secs(),
            "settings": args.settings.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        }),
        git_commit: git_commit(),
    };
    std::fs::create_dir_all(&args.out_dir)?;
    write_json(&args.out_dir.join(format!("{}.json", args.name)), &report)?;
    draw(&args, &report, &measured.marks)?;
    println!("\n{}", markdown_table(&report));
    Ok(report)
}

/// What the phases measured.
struct Measured {
    alone_send: SendFigures,
    with_pollers: Option<SendFigures>,
    during_pollers_send: Vec<LoadResult>,
    with_storm: Option<SendFigures>,
    alone: Vec<LoadResult>,
    during_send: Vec<LoadResult>,
    status_metric: Option<String>,
    /// Moments of the benchmark's clock worth a line on the plot.
    marks: Vec<(f64, String)>,
}

async fn measure(
    cluster: &LocalCluster,
    args: &StormArgs,
    apns: &ApnsMock,
    fcm: &FcmMock,
    pools: Arc<TokenPools>,
) -> Result<Measured> {
    let origin = Instant::now();
    let addr = cluster.base.trim_start_matches("http://").to_owned();
    let mut marks = Vec::new();
    println!("the send alone");
    marks.push((0.0, "send alone".to_owned()));
    let alone_send = send(cluster, args, apns, fcm, "the send alone", None).await?.0;
    let mut status_metric = None;

    let mut alone = Vec::new();
    if !args.skip_alone {
        for load in args.loads() {
            tokio::time::sleep(BETWEEN_PHASES).await;
            println!("{} alone, {} s", load.name(), args.seconds);
            let subject = subject(&addr, &alone_send.notification_id, args);
            let requests = Arc::new(Requests::new(load, &subject, Arc::clone(&pools))?);
            let phase = Phase {
                pace: args.alone(load),
                connections: usize::from(args.connections),
                length: Duration::from_secs(args.seconds),
                request_deadline: REQUEST_DEADLINE,
            };
            if load == Load::RegistrationReads {
                // Phones read their own registrations again and again: the
                // measure is of a cache that steady reading has filled, so
                // one unmeasured phase reads the pool first.
                println!("{} warm-up, {} s (not measured)", load.name(), args.seconds);
                marks.push((origin.elapsed().as_secs_f64(), "reads warm-up".to_owned()));
                let warm_up = drive(
                    &addr,
                    Arc::clone(&requests),
                    phase,
                    origin,
                    Arc::new(AtomicBool::new(false)),
                )
                .await?;
                println!("  warm-up: {:.0}/s", warm_up.per_s);
            }
            let (cpu_before, computed_before) = (Cpu::read(cluster), status_metric::read(cluster).await);
            let stop = Arc::new(AtomicBool::new(false));
            let figures = drive(&addr, Arc::clone(&requests), phase, origin, stop).await?;
            let cpu = Cpu::read(cluster).since(cpu_before);
            let computed = computed(
                computed_before,
                status_metric::read(cluster).await,
                &mut status_metric,
            );
            print_line(load, &figures);
            alone.push(load_result(
                load,
                phase.pace,
                requests.items(),
                figures,
                Some(cpu),
                computed,
            ));
        }
    }

    let mut with_pollers = None;
    let mut during_pollers_send = Vec::new();
    if !args.skip_storm && args.pollers > 0 && args.loads().contains(&Load::Pollers) {
        tokio::time::sleep(BETWEEN_PHASES).await;
        println!("the send with {} pollers", args.pollers);
        marks.push((origin.elapsed().as_secs_f64(), "send with the pollers".to_owned()));
        let pollers = [(Load::Pollers, args.pollers_pace())];
        let run = StormRun {
            addr: &addr,
            loads: &pollers,
            pools: &pools,
            origin,
        };
        let (figures, loads) = send(cluster, args, apns, fcm, "the send with the pollers", Some(run)).await?;
        for ((load, pace, items), (load_figures, computed)) in loads {
            print_line(load, &load_figures);
            during_pollers_send.push(load_result(load, pace, items, load_figures, None, computed));
        }
        with_pollers = Some(figures);
    }

    let mut during_send = Vec::new();
    let mut with_storm = None;
    let storm: Vec<(Load, Pace)> = args
        .loads()
        .into_iter()
        .filter_map(|load| Some((load, args.during_send(load)?)))
        .collect();
    if !args.skip_storm && !storm.is_empty() {
        tokio::time::sleep(BETWEEN_PHASES).await;
        println!(
            "the send with the storm: {}",
            storm
                .iter()
                .map(|(load, _)| load.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
        marks.push((origin.elapsed().as_secs_f64(), "send with the storm".to_owned()));
        let storm_run = StormRun {
            addr: &addr,
            loads: &storm,
            pools: &pools,
            origin,
        };
        let (figures, loads) = send(
            cluster,
            args,
            apns,
            fcm,
            "the send with the storm",
            Some(storm_run),
        )
        .await?;
        for ((load, pace, items), (load_figures, computed)) in loads {
            print_line(load, &load_figures);
            during_send.push(load_result(load, pace, items, load_figures, None, computed));
        }
        if let Some(count) = figures.status_computations {
            status_metric.get_or_insert_with(|| "status computations".to_owned());
            println!("status computations during the send: {count}");
        }
        with_storm = Some(figures);
    }
    Ok(Measured {
        alone_send,
        with_pollers,
        during_pollers_send,
        with_storm,
        alone,
        during_send,
        status_metric,
        marks,
    })
}

/// What the requests of a phase are about.
fn subject<'a>(addr: &'a str, notification_id: &'a str, args: &StormArgs) -> Subject<'a> {
    Subject {
        addr,
        notification_id,
        // A tag of its own for every phase: its new tokens are new.
        run_tag: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64),
        receipts_per_request: usize::from(args.receipts_per_request),
        pollers: args.pollers,
        seeded_topic: SEEDED_TOPIC,
    }
}

/// The storm to run during a send.
struct StormRun<'a> {
    addr: &'a str,
    loads: &'a [(Load, Pace)],
    pools: &'a Arc<TokenPools>,
    origin: Instant,
}

/// A load's figures during the send, with the status computations over it.
type StormLoad = ((Load, Pace, u64), (LoadFigures, Option<f64>));

/// Sends to [`SEND_TOPIC`] and follows the send to its end, the storm's
/// loads running from the send request until then when given.
async fn send(
    cluster: &LocalCluster,
    args: &StormArgs,
    apns: &ApnsMock,
    fcm: &FcmMock,
    label: &str,
    storm: Option<StormRun<'_>>,
) -> Result<(SendFigures, Vec<StormLoad>)> {
    for mock in [&apns.state, &fcm.state] {
        mock.accounting.reset();
    }
    let accepted =
        || apns.state.accounting.counters().unique_tokens + fcm.state.accounting.counters().unique_tokens;
    let timeout = Duration::from_secs(args.timeout_secs);
    let computed_before = status_metric::read(cluster).await;
    let cpu_before = Cpu::read(cluster);
    let sent = Instant::now();
    let id = cluster
        .send(&json!({"topics": [SEND_TOPIC], "title": "Storm", "body": label}))
        .await?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut running = Vec::new();
    if let Some(storm) = &storm {
        let subject = subject(storm.addr, &id, args);
        for (load, pace) in storm.loads {
            let requests = Arc::new(Requests::new(*load, &subject, Arc::clone(storm.pools))?);
            let phase = Phase {
                pace: *pace,
                connections: usize::from(args.connections),
                length: timeout,
                request_deadline: REQUEST_DEADLINE,
            };
            let items = requests.items();
            let task = tokio::spawn(drive_owned(
                storm.addr.to_owned(),
                requests,
                phase,
                storm.origin,
                Arc::clone(&stop),
            ));
            running.push(((*load, *pace, items), task));
        }
    }
    let followed = follow(
        cluster,
        std::slice::from_ref(&id),
        args.send_devices,
        sent,
        timeout,
        &accepted,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let cpu = Cpu::read(cluster).since(cpu_before);
    let peak_memory = PeakMemory::read(cluster);
    let mut loads = Vec::new();
    for (what, task) in running {
        loads.push((what, task.await.context("a storm load's task failed")??));
    }
    let computed_after = status_metric::read(cluster).await;
    let (curve, statuses) = followed?;
    let audience = statuses
        .first()
        .and_then(|status| status["audience"]["total"].as_u64())
        .unwrap_or(0);
    let at = |q: f64| time_to(&curve, audience, q);
    let status_computations = computed_before
        .zip(computed_after)
        .map(|(before, after)| after.value - before.value);
    let figures = SendFigures {
        notification_id: id,
        audience,
        t50_s: at(0.5),
        t90_s: at(0.9),
        t99_s: at(0.99),
        t100_s: at(1.0),
        cpu,
        peak_memory,
        status_computations,
    };
    println!(
        "{label}: {audience} devices, t90 {}",
        figures.t90_s.map_or("–".to_owned(), |t| format!("{t:.1} s"))
    );
    let loads = loads
        .into_iter()
        .map(|(what, figures)| (what, (figures, status_computations)))
        .collect();
    Ok((figures, loads))
}

/// [`drive`] with owned arguments, for a task of its own.
async fn drive_owned(
    addr: String,
    requests: Arc<Requests>,
    phase: Phase,
    origin: Instant,
    stop: Arc<AtomicBool>,
) -> Result<LoadFigures> {
    drive(&addr, requests, phase, origin, stop).await
}

/// Status computations between two readings (and the metric's name,
/// kept in `metric` the first time it is seen).
fn computed(
    before: Option<status_metric::Count>,
    after: Option<status_metric::Count>,
    metric: &mut Option<String>,
) -> Option<f64> {
    let (before, after) = (before?, after?);
    metric.get_or_insert_with(|| after.metric.clone());
    Some(after.value - before.value)
}

fn load_result(
    load: Load,
    pace: Pace,
    items: u64,
    figures: LoadFigures,
    cpu: Option<Cpu>,
    computed: Option<f64>,
) -> LoadResult {
    let seconds = figures.seconds;
    LoadResult {
        load,
        pace: match pace {
            Pace::ClosedLoop => "closed-loop",
            Pace::OpenLoop { .. } => "open-loop",
        },
        target_per_s: pace.target_per_s(),
        items_per_request: items,
        status_computations: computed,
        status_computations_per_s: computed.filter(|_| seconds > 0.0).map(|count| count / seconds),
        figures,
        cpu,
    }
}

fn print_line(load: Load, figures: &LoadFigures) {
    println!(
        "  {:<20} {:>9.0}/s  p50 {:>7} p99 {:>7}  503s {}  errors {}",
        load.name(),
        figures.items_per_s,
        figures.p50_ms.map_or("–".to_owned(), |ms| format!("{ms:.1}ms")),
        figures.p99_ms.map_or("–".to_owned(), |ms| format!("{ms:.1}ms")),
        figures.status_503,
        figures.errors_by_status.values().sum::<u64>() + figures.timeouts + figures.connection_errors,
    );
}

/// `<name>.svg`: every load's rate and p99 over the benchmark's clock.
fn draw(args: &StormArgs, report: &StormReport, marks: &[(f64, String)]) -> Result<()> {
    let labels: Vec<String> = report
        .alone
        .iter()
        .map(|r| format!("{} alone", r.load.name()))
        .chain(
            report
                .during_send
                .iter()
                .map(|r| format!("{} in the storm", r.load.name())),
        )
        .collect();
    let lines: Vec<Timeline<'_>> = report
        .alone
        .iter()
        .chain(&report.during_send)
        .zip(&labels)
        .map(|(result, label)| Timeline {
            label,
            points: result
                .figures
                .timeline
                .iter()
                .map(|second| {
                    let items = second.per_s * result.items_per_request as f64;
                    (second.t_s, items, second.p99_ms)
                })
                .collect(),
        })
        .collect();
    let marks: Vec<(f64, &str)> = marks.iter().map(|(at, what)| (*at, what.as_str())).collect();
    let title = format!(
        "The storm: {} devices, a send of {} on a {}-core machine",
        report.devices, report.send_audience, report.machine.cpus
    );
    plot::rate_and_latency(
        &args.out_dir.join(format!("{}.svg", args.name)),
        &title,
        &lines,
        &marks,
    )
}
