//! The 90in2 benchmark: seed an audience, run the whole cluster (release
//! processes) against the mocks, send one notification and measure, from
//! the mocks' own counters, how fast it reached the devices; then measure
//! the dispatchers alone (batches already queued) and the ceiling of the
//! same mocks, and write the report and the plot. A panel of the audience
//! reports receipts meanwhile, for the device-side t90 ([`device_side`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::{Value, json};

use super::ceiling::{self, CeilingPlan, CeilingRun};
use super::device_side::{self, DeviceSide};
use super::mocks::h2load_apns;
use super::{AudienceArgs, git_commit, load_audience, plot, write_json};
use crate::audience::{AudienceShape, Layout, localizations};
use crate::local_cluster::{Env, LocalCluster, LocalClusterConfig, Member, delete_namespace};
use crate::mocks::{ApnsMock, FaultConfig, FcmMock, WebPushMock, apps_file_table};
use crate::procinfo::{Usage, own_threads_cpu_s, processes_cpu_s, usage};
use crate::seed::app_id;

/// Names of the mocks' threads start with this.
pub(crate) const MOCK_THREAD_PREFIX: &str = "mock-";
/// How often the mocks' counters are read during a send.
const POLL: Duration = Duration::from_millis(100);

/// The relay settings that switch scheduling off: ten minutes ahead and
/// a floor no audience reaches release every job at once.
pub const UNSCHEDULED: [(&str, &str); 2] = [
    ("CLARION_SCHEDULE_AHEAD_MS", "600000"),
    ("CLARION_SCHEDULE_MIN_TOKENS", "1000000000"),
];

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub audience: AudienceArgs,
    /// Name of the result files (default `90in2-<devices>`).
    #[arg(long)]
    pub name: Option<String>,
    /// Share of iPhones, in percent (the rest are Android).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub ios_percent: u8,
    /// Share of browsers (web push subscriptions), in percent of the
    /// devices, taken from both apps' phones alike; their ceiling is a
    /// minimal encrypting client against the mock web push service.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub web_percent: u8,
    /// The mock web push service opens one push in this many (decrypting
    /// is the browser's cost, not the push service's).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub decrypt_one_in: u32,
    /// Share of dead tokens (apps uninstalled), in percent.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub dead_percent: u8,
    /// Apps (`default`, `app2`, …), each with `--devices` devices of its own
    /// and its own connections, all served by the same mocks; one
    /// notification per app, sent at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4))]
    pub apps: u32,
    /// How many of the locales en-GB, fr, fr-CA, de the devices carry (0:
    /// none); the notifications then carry fr, fr-CA and de texts.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=4))]
    pub locales: u8,
    /// Requests per mock for the ceiling.
    #[arg(long, default_value_t = 300_000)]
    pub ceiling_requests: u64,
    /// Skip the dispatcher-alone phase (halves the time of a large run).
    #[arg(long)]
    pub skip_dispatcher_phase: bool,
    /// Give up (and fail) when a phase takes longer than this.
    #[arg(long, default_value_t = 1800)]
    pub timeout_secs: u64,
    /// Extra `KEY=VALUE` settings for every Clarion process (repeatable),
    /// e.g. `--set CLARION_DISPATCH_CONNECTIONS=4`.
    #[arg(long = "set", value_parser = parse_setting)]
    pub settings: Vec<(String, String)>,
    /// Where the JSON report and the SVG plot are written.
    #[arg(long, default_value_os_t = super::default_results_dir())]
    pub out_dir: PathBuf,
}

pub(crate) fn parse_setting(value: &str) -> Result<(String, String), String> {
    let (key, value) = value.split_once('=').ok_or("expected KEY=VALUE")?;
    if !key.starts_with("CLARION_") {
        return Err(format!("{key} is not a CLARION_ setting"));
    }
    Ok((key.to_owned(), value.to_owned()))
}

/// Resource use of every Clarion process.
#[derive(Debug, Serialize)]
pub struct Processes {
    pub coordinator: Usage,
    pub harvester: Usage,
    pub dispatcher_ios: Usage,
    pub dispatcher_android: Usage,
    pub dispatcher_web: Usage,
    /// CPU seconds the mock APNs, FCM and web push service (threads of the benchmark process)
    /// used during the send: the share of the machine the stand-ins for
    /// Apple and Google took.
    pub mocks_cpu_s: f64,
    /// CPU seconds PostgreSQL used during the send (every `postgres`
    /// process of this machine, the children they reaped included); absent
    /// when it runs elsewhere.
    pub postgres_cpu_s: Option<f64>,
    /// CPU seconds RabbitMQ (`beam.smp`) used during the send; absent when
    /// it runs elsewhere.
    pub rabbitmq_cpu_s: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub name: String,
    /// Devices targeted.
    pub audience: u64,
    /// Devices the providers could reach (the audience less dead tokens).
    pub reachable: u64,
    /// Seconds from the send request until 50 / 90 / 99 / 100% of the
    /// reachable devices were accepted, read from the mocks' counters.
    pub t50_s: Option<f64>,
    pub t90_s: Option<f64>,
    pub t99_s: Option<f64>,
    pub t100_s: Option<f64>,
    pub ninety_in_two: bool,
    /// What the receipts panel's phones reported: the device-side 90in2.
    pub device: DeviceSide,
    /// Sustained end-to-end rate: pushes between 10% and 90% of the audience.
    pub pushes_per_s: f64,
    /// Both mocks driven at once by minimal clients on Clarion's transport.
    pub ceiling_per_s: f64,
    /// The dispatchers alone, batches already queued, same window.
    pub dispatcher_per_s: Option<f64>,
    pub dispatcher_ratio: Option<f64>,
    pub end_to_end_ratio: f64,
    /// The share of the ideal time the send achieved: (0.9 × audience /
    /// ceiling) / t90, the ideal being every push at the ceiling rate.
    pub efficiency: Option<f64>,
    /// The same with each platform at its own ceiling
    /// ([`super::webpush::share::ideal_seconds`]): equal to `efficiency`
    /// when the platforms' shares match their ceilings, higher when a slow
    /// platform (web) holds a large share.
    pub platform_efficiency: Option<f64>,
    /// Reachable devices by platform (ios, android, web).
    pub reachable_by_platform: [u64; 3],
    /// `/proc/loadavg` (1, 5, 15 min) before the ceiling and after the
    /// send: the machine may be shared.
    pub load_average_before: [f64; 3],
    pub load_average_after: [f64; 3],
    /// Pushes accepted in the first 5 s after the first accept, per second,
    /// over the sustained rate: below 1 when a send starts slowly.
    pub first_5s_ratio: Option<f64>,
    /// CPU of both dispatchers over the end-to-end send, per push.
    pub dispatcher_cpu_us_per_push: f64,
    /// CPU of the minimal ceiling clients (this process, mocks aside), per
    /// request: what the bare transport costs.
    pub ceiling_cpu_us_per_push: f64,
    /// CPU of the mocks over the end-to-end send, per push.
    pub mocks_cpu_us_per_push: f64,
    /// CPU of the coordinator over the end-to-end send, per device.
    pub coordinator_cpu_us_per_device: f64,
    /// CPU of PostgreSQL over the end-to-end send, per push (when it runs
    /// on this machine): whatever else uses the database meanwhile counts.
    pub postgres_cpu_us_per_push: Option<f64>,
    /// CPU of RabbitMQ over the end-to-end send, per push (when it runs on
    /// this machine).
    pub rabbitmq_cpu_us_per_push: Option<f64>,
    /// What Clarion adds to the bare transport, in µs of CPU per push
    /// (issue 40's figure; absent when PostgreSQL or RabbitMQ run
    /// elsewhere).
    pub overhead: Option<Overhead>,
    pub ceiling: CeilingDetail,
    /// Peak RSS and CPU of each process over the end-to-end send.
    pub processes: Processes,
    /// The coordinator's own timings, for comparison (one status per app
    /// when there are several).
    pub coordinator_status: Value,
    /// Payloads the dispatchers built over the end-to-end send: one per
    /// notification, environment and text, however many devices.
    pub payloads_prepared: Option<u64>,
    /// Token batches the dispatchers delivered over the end-to-end send.
    pub batches_delivered: Option<u64>,
    pub seeded_rows: Option<u64>,
    pub seed_s: Option<f64>,
    pub machine: Machine,
    pub configuration: Value,
    pub git_commit: Option<String>,
    /// (seconds since the send request, share of the reachable audience).
    pub curve: Vec<(f64, f64)>,
}

/// Clarion's own CPU per push beyond the bare transport: RabbitMQ,
/// PostgreSQL, the harvester, the coordinator and the dispatchers' excess
/// over the minimal ceiling client, each in µs per push, and their sum.
/// The ceiling client's figure mixes the platforms as the ceiling phase
/// does (as many APNs as FCM requests, the web share's at least 10,000),
/// so the excess compares like with like only for the default two-platform
/// audience of half iPhones.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Overhead {
    pub rabbitmq_us: f64,
    pub postgres_us: f64,
    pub harvester_us: f64,
    pub coordinator_us: f64,
    /// Dispatchers' CPU per push less the ceiling client's (negative when
    /// the dispatchers are the cheaper).
    pub dispatcher_excess_us: f64,
    pub total_us: f64,
}

impl Overhead {
    fn of(processes: &Processes, dispatcher_us: f64, ceiling_us: f64, pushes: f64) -> Option<Self> {
        let per_push = |cpu_s: f64| cpu_s * 1e6 / pushes;
        let rabbitmq_us = per_push(processes.rabbitmq_cpu_s?);
        let postgres_us = per_push(processes.postgres_cpu_s?);
        let harvester_us = per_push(processes.harvester.cpu_s);
        let coordinator_us = per_push(processes.coordinator.cpu_s);
        let dispatcher_excess_us = dispatcher_us - ceiling_us;
        Some(Self {
            rabbitmq_us,
            postgres_us,
            harvester_us,
            coordinator_us,
            dispatcher_excess_us,
            total_us: rabbitmq_us + postgres_us + harvester_us + coordinator_us + dispatcher_excess_us,
        })
    }
}

#[derive(Debug, Serialize)]
pub struct CeilingDetail {
    pub apns: CeilingRun,
    pub fcm: CeilingRun,
    /// The minimal encrypting client against the mock web push service,
    /// when the audience has browsers.
    pub webpush: Option<CeilingRun>,
    /// h2load against the APNs mock alone, when installed (reference).
    pub h2load_apns_per_s: Option<f64>,
}

pub async fn run(args: RunArgs) -> Result<Report> {
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("90in2-{}", args.audience.devices));
    let shape = AudienceShape {
        web_percent: args.web_percent,
        ios_percent: args.ios_percent,
        dead_percent: args.dead_percent,
        layout: Layout::Single,
        locales: args.locales,
    };
    let (seeded_rows, seed_s) = load_audience(&args.audience, shape, args.apps).await?;

    let work = std::env::temp_dir().join(format!("clarion-bench-{}", std::process::id()));
    let load_average_before = super::load_average();
    let mocks = super::start_mocks(&work).await?;
    let (apns, fcm) = (&mocks.apns, &mocks.fcm);
    // The web dispatcher always runs; the mock knows browsers only with a
    // web share.
    let web = match args.web_percent {
        0 => None,
        _ => {
            super::webpush::share::prepare_mock(
                &mocks.web,
                &args.audience.database_url,
                shape,
                args.audience.devices,
                args.apps,
                args.decrypt_one_in,
            )
            .await?;
            Some(&*mocks.web)
        }
    };
    let dead = FaultConfig {
        dead_prefixes: vec![crate::audience::DEAD_PREFIX.into()],
        ..FaultConfig::default()
    };

    println!(
        "measuring the ceiling ({} requests per mock)",
        args.ceiling_requests
    );
    let plan = CeilingPlan {
        requests: args.ceiling_requests,
        connections: 2,
        in_flight: 1000,
    };
    let (own_cpu_before, mocks_cpu_before) = (own_cpu_s(), own_threads_cpu_s(MOCK_THREAD_PREFIX));
    let (ceiling_apns, ceiling_fcm) = ceiling::measure(apns, fcm, plan).await?;
    // The browsers' ceiling after the phones' (its encryption takes every
    // core it is given, which would starve the phones' clients of their
    // OAuth2 and connection deadlines), for their share of the requests:
    // measured alone, it is the higher, so the harsher, ceiling.
    let web_plan = CeilingPlan {
        requests: (args.ceiling_requests * u64::from(args.web_percent) / 100).max(10_000),
        in_flight: 256,
        ..plan
    };
    let ceiling_web = match web {
        Some(web) => Some(super::webpush::ceiling::measure(web, web_plan).await?),
        None => None,
    };
    let ceiling_client_cpu_s =
        (own_cpu_s() - own_cpu_before) - (own_threads_cpu_s(MOCK_THREAD_PREFIX) - mocks_cpu_before);
    let ceiling_cpu_us_per_push = ceiling_client_cpu_s * 1e6
        / (ceiling_apns.requests + ceiling_fcm.requests + ceiling_web.map_or(0, |w| w.requests)).max(1)
            as f64;
    let h2load_apns_per_s = h2load_apns(apns, args.ceiling_requests).await.ok();
    let ceiling_per_s = ceiling_apns.per_s + ceiling_fcm.per_s + ceiling_web.map_or(0.0, |w| w.per_s);
    println!(
        "ceiling: APNs {:.0}/s + FCM {:.0}/s + web {:.0}/s = {:.0}/s (h2load APNs alone: {})",
        ceiling_apns.per_s,
        ceiling_fcm.per_s,
        ceiling_web.map_or(0.0, |w| w.per_s),
        ceiling_per_s,
        h2load_apns_per_s.map_or("not installed".into(), |r| format!("{r:.0}/s"))
    );
    for mock in [&apns.state, &fcm.state]
        .into_iter()
        .chain(web.map(|web| &web.state))
    {
        mock.accounting.reset();
        mock.faults.set(dead.clone());
    }

    let mut dispatcher_env = mocks.dispatcher_env(&work)?;
    let mut extra: Env = args.settings.clone();
    if args.apps > 1 {
        // Every app but `default` in the apps file, all on the same mocks.
        let table: String = (1..args.apps)
            .map(|app| {
                apps_file_table(&app_id(app), apns, fcm)
                    + &web.map_or(String::new(), |web| web.app_table(&app_id(app)))
            })
            .collect();
        let apps_file = work.join("apps.toml");
        std::fs::write(&apps_file, table)?;
        extra.push(("CLARION_APPS_FILE".into(), apps_file.display().to_string()));
    }
    dispatcher_env.extend(extra.iter().cloned());
    let namespace = format!("bench-{}", std::process::id());
    let config = LocalClusterConfig {
        database_url: args.audience.database_url.clone(),
        amqp_url: args.audience.amqp_url.clone(),
        namespace: namespace.clone(),
        harvesters: 1,
        coordinator_env: extra.clone(),
        harvester_env: extra.clone(),
        dispatcher_env,
        // One directory per run name: a run's logs outlive the next run.
        log_dir: super::bench_log_dir()?.join(&name),
    };
    let mut cluster = crate::bench::start_cluster(&config).await?;
    let outcome = measure(&mut cluster, &args, apns, fcm, web).await;
    let processes = outcome.as_ref().ok().map(|m| m.processes.clone());
    cluster.stop();
    delete_namespace(&args.audience.amqp_url, &namespace).await;
    let _ = std::fs::remove_dir_all(&work);
    let measured = outcome?;

    let curve = measured.end_to_end;
    let reachable = measured.reachable;
    let at = |q: f64| time_to(&curve, reachable, q);
    let t90 = at(0.9);
    let pushes_per_s = sustained_rate(&curve, reachable).unwrap_or(0.0);
    let dispatcher_per_s = measured
        .dispatcher_alone
        .as_ref()
        .and_then(|c| sustained_rate(c, reachable));
    let processes = processes.context("no process figures")?.into_report();
    let pushes = reachable.max(1) as f64;
    let dispatcher_cpu_s =
        processes.dispatcher_ios.cpu_s + processes.dispatcher_android.cpu_s + processes.dispatcher_web.cpu_s;
    let ceilings = [
        ceiling_apns.per_s,
        ceiling_fcm.per_s,
        ceiling_web.map_or(0.0, |w| w.per_s),
    ];
    let by_platform: Vec<(u64, f64)> = measured
        .reachable_by_platform
        .iter()
        .zip(ceilings)
        .map(|(devices, rate)| (*devices, rate))
        .collect();
    let ideal_t90 = super::webpush::share::ideal_seconds(&by_platform, 0.9);
    let dispatcher_cpu_us_per_push = dispatcher_cpu_s * 1e6 / pushes;
    let report = Report {
        overhead: Overhead::of(
            &processes,
            dispatcher_cpu_us_per_push,
            ceiling_cpu_us_per_push,
            pushes,
        ),
        efficiency: t90.map(|t90| 0.9 * reachable as f64 / ceiling_per_s / t90),
        platform_efficiency: t90.zip(ideal_t90).map(|(t90, ideal)| ideal / t90),
        reachable_by_platform: measured.reachable_by_platform,
        load_average_before,
        load_average_after: super::load_average(),
        first_5s_ratio: first_seconds_rate(&curve, 5.0).map(|rate| rate / pushes_per_s.max(1e-9)),
        dispatcher_cpu_us_per_push,
        ceiling_cpu_us_per_push,
        mocks_cpu_us_per_push: processes.mocks_cpu_s * 1e6 / pushes,
        coordinator_cpu_us_per_device: processes.coordinator.cpu_s * 1e6 / measured.audience.max(1) as f64,
        postgres_cpu_us_per_push: processes.postgres_cpu_s.map(|cpu_s| cpu_s * 1e6 / pushes),
        rabbitmq_cpu_us_per_push: processes.rabbitmq_cpu_s.map(|cpu_s| cpu_s * 1e6 / pushes),
        name: name.clone(),
        audience: measured.audience,
        reachable,
        t50_s: at(0.5),
        t90_s: t90,
        t99_s: at(0.99),
        t100_s: at(1.0),
        ninety_in_two: t90.is_some_and(|t| t <= 120.0),
        device: measured.device,
        pushes_per_s,
        ceiling_per_s,
        dispatcher_per_s,
        dispatcher_ratio: dispatcher_per_s.map(|rate| rate / ceiling_per_s),
        end_to_end_ratio: pushes_per_s / ceiling_per_s,
        ceiling: CeilingDetail {
            apns: ceiling_apns,
            fcm: ceiling_fcm,
            webpush: ceiling_web,
            h2load_apns_per_s,
        },
        processes,
        coordinator_status: measured.status,
        payloads_prepared: measured.payloads_prepared,
        batches_delivered: measured.batches_delivered,
        seeded_rows,
        seed_s,
        machine: machine(),
        configuration: json!({
            "ios_percent": args.ios_percent,
            "web_percent": args.web_percent,
            "decrypt_one_in": args.decrypt_one_in,
            "dead_percent": args.dead_percent,
            "apps": args.apps,
            "locales": args.locales,
            "harvesters": 1,
            "dispatchers_per_platform": 1,
            "settings": args.settings.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        }),
        git_commit: git_commit(),
        curve: downsample(&curve, reachable, 400),
    };
    std::fs::create_dir_all(&args.out_dir)?;
    write_json(&args.out_dir.join(format!("{name}.json")), &report)?;
    let title = format!(
        "90in2: {} devices on a {}-core machine",
        report.audience, report.machine.cpus
    );
    plot::delivery_curve(
        &args.out_dir.join(format!("{name}.svg")),
        &title,
        &report.curve,
        t90,
    )?;
    print_table(&report);
    Ok(report)
}

struct Measured {
    audience: u64,
    reachable: u64,
    reachable_by_platform: [u64; 3],
    end_to_end: Vec<(f64, u64)>,
    dispatcher_alone: Option<Vec<(f64, u64)>>,
    status: Value,
    device: DeviceSide,
    processes: ProcessUsage,
    payloads_prepared: Option<u64>,
    batches_delivered: Option<u64>,
}

#[derive(Clone)]
struct ProcessUsage {
    clarion: [Usage; 5],
    mocks_cpu_s: f64,
    postgres_cpu_s: Option<f64>,
    rabbitmq_cpu_s: Option<f64>,
}

impl ProcessUsage {
    fn into_report(self) -> Processes {
        let [
            coordinator,
            harvester,
            dispatcher_ios,
            dispatcher_android,
            dispatcher_web,
        ] = self.clarion;
        Processes {
            mocks_cpu_s: self.mocks_cpu_s,
            postgres_cpu_s: self.postgres_cpu_s,
            rabbitmq_cpu_s: self.rabbitmq_cpu_s,
            coordinator,
            harvester,
            dispatcher_ios,
            dispatcher_android,
            dispatcher_web,
        }
    }
}

async fn measure(
    cluster: &mut LocalCluster,
    args: &RunArgs,
    apns: &ApnsMock,
    fcm: &FcmMock,
    web: Option<&WebPushMock>,
) -> Result<Measured> {
    let timeout = Duration::from_secs(args.timeout_secs);
    let size = cluster.get("/api/v1/topics/breaking/uk").await?;
    println!("topic breaking/uk: {} subscribers", size["subscribers"]);
    let accepted = || {
        apns.state.accounting.counters().unique_tokens
            + fcm.state.accounting.counters().unique_tokens
            + web.map_or(0, |web| web.state.accounting.counters().unique_tokens)
    };

    device_side::start_panel(&args.audience.database_url, cluster, apns, fcm, web).await?;
    println!("end to end: sending");
    let mocks_cpu_before = own_threads_cpu_s(MOCK_THREAD_PREFIX);
    let services_before = ServicesCpu::read();
    let sent = Instant::now();
    let ids = send_per_app(cluster, args, "90in2").await?;
    let expected = args.audience.devices * u64::from(args.apps);
    let (curve, _) = follow(cluster, &ids, expected, sent, timeout, &accepted).await?;
    // CPU over the send itself, before the wait for the panel's receipts.
    let services_used = ServicesCpu::read().since(services_before);
    let pids = [
        cluster.coordinator.pid(),
        cluster.harvesters.first().and_then(|h| h.pid()),
        cluster.dispatchers.first().and_then(|d| d.pid()),
        cluster.dispatchers.get(1).and_then(|d| d.pid()),
        cluster.dispatchers.get(2).and_then(|d| d.pid()),
    ];
    let processes = ProcessUsage {
        clarion: pids.map(|pid| pid.and_then(usage).unwrap_or_default()),
        mocks_cpu_s: own_threads_cpu_s(MOCK_THREAD_PREFIX) - mocks_cpu_before,
        postgres_cpu_s: services_used.postgres_s,
        rabbitmq_cpu_s: services_used.rabbitmq_s,
    };
    let (statuses, device) = device_side::wait_for_panel(cluster, &ids).await?;
    let total = |field: &dyn Fn(&Value) -> u64| statuses.iter().map(field).sum::<u64>();
    let audience = total(&|s| s["audience"]["total"].as_u64().unwrap_or(0));
    let reachable_by_platform = ["ios", "android", "web"].map(|p| {
        total(&|s| {
            s["audience"][p]
                .as_u64()
                .unwrap_or(0)
                .saturating_sub(s["delivery"][p]["unregistered"].as_u64().unwrap_or(0))
        })
    });
    let gone = total(&|s| {
        ["ios", "android", "web"]
            .iter()
            .map(|p| s["delivery"][p]["unregistered"].as_u64().unwrap_or(0))
            .sum()
    });
    let reachable = audience - gone;
    let dispatcher_metrics = dispatcher_metrics(cluster).await;
    let payloads_prepared = dispatcher_metrics
        .as_ref()
        .map(|m| metric_sum(m, "clarion_dispatcher_payloads_prepared_total"));
    let batches_delivered = dispatcher_metrics
        .as_ref()
        .map(|m| metric_sum(m, "clarion_dispatcher_batches_total"));
    let status = match <[Value; 1]>::try_from(statuses) {
        Ok([one]) => one,
        Err(several) => Value::Array(several),
    };

    let dispatcher_alone = if args.skip_dispatcher_phase {
        None
    } else {
        println!("dispatchers alone: queueing every batch first");
        cluster.stop_dispatchers();
        // The job relay releases only a few seconds of work ahead of the
        // dispatchers' reports; this phase wants the whole audience queued.
        for (key, value) in UNSCHEDULED {
            cluster.coordinator.set(key, value);
        }
        cluster.restart(Member::Coordinator).await?;
        apns.state.accounting.reset();
        fcm.state.accounting.reset();
        if let Some(web) = web {
            web.state.accounting.reset();
        }
        let ids = send_per_app(cluster, args, "dispatchers alone").await?;
        for id in &ids {
            wait_for(cluster, id, timeout, |s| s["status"] == "dispatching").await?;
        }
        let started = Instant::now();
        cluster.start_dispatchers().await?;
        let (curve, _) = follow(cluster, &ids, expected, started, timeout, &accepted).await?;
        Some(curve)
    };
    Ok(Measured {
        audience,
        reachable,
        reachable_by_platform,
        end_to_end: curve,
        dispatcher_alone,
        status,
        device,
        processes,
        payloads_prepared,
        batches_delivered,
    })
}

/// CPU seconds of PostgreSQL and of RabbitMQ (each `None` when it does not
/// run on this machine).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServicesCpu {
    pub(crate) postgres_s: Option<f64>,
    pub(crate) rabbitmq_s: Option<f64>,
}

impl ServicesCpu {
    /// What they have used so far.
    pub(crate) fn read() -> Self {
        Self {
            postgres_s: processes_cpu_s(&["postgres"]),
            rabbitmq_s: processes_cpu_s(&["beam.smp"]),
        }
    }

    /// What they used since `before`: `None`, not a negative figure, when a
    /// process reaped elsewhere (not by the postmaster) took its CPU out of
    /// this reading.
    pub(crate) fn since(self, before: Self) -> Self {
        let used = |now: Option<f64>, then: Option<f64>| Some(now? - then?).filter(|cpu_s| *cpu_s >= 0.0);
        Self {
            postgres_s: used(self.postgres_s, before.postgres_s),
            rabbitmq_s: used(self.rabbitmq_s, before.rabbitmq_s),
        }
    }
}

/// Sends one notification to `breaking/uk` per app, at once; with
/// localizations when the devices carry locales.
async fn send_per_app(cluster: &LocalCluster, args: &RunArgs, body: &str) -> Result<Vec<String>> {
    let sends = (0..args.apps).map(|app| {
        let mut notification = json!({
            "app": app_id(app),
            "topics": ["breaking/uk"],
            "title": "Benchmark",
            "body": body,
        });
        if args.locales > 0 {
            notification["localizations"] = localizations();
        }
        async move { cluster.send(&notification).await }
    });
    futures::future::try_join_all(sends).await
}

/// Every dispatcher's `/metrics` text, or `None` when one cannot be read.
async fn dispatcher_metrics(cluster: &LocalCluster) -> Option<Vec<String>> {
    let http = reqwest::Client::new();
    let mut texts = Vec::new();
    for dispatcher in &cluster.dispatchers {
        let addr = dispatcher.setting("CLARION_HTTP_ADDR")?;
        let response = http.get(format!("http://{addr}/metrics")).send().await.ok()?;
        texts.push(response.text().await.ok()?);
    }
    Some(texts)
}

/// The sum of every series of `name` (a counter) over Prometheus texts.
fn metric_sum(texts: &[String], name: &str) -> u64 {
    texts
        .iter()
        .flat_map(|text| text.lines())
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Polls the mocks until every notification of `ids` is complete and every
/// reachable device was counted, with a progress bar of the `expected`
/// devices; returns the curve and the final statuses.
pub(crate) async fn follow(
    cluster: &LocalCluster,
    ids: &[String],
    expected: u64,
    since: Instant,
    timeout: Duration,
    accepted: &impl Fn() -> u64,
) -> Result<(Vec<(f64, u64)>, Vec<Value>)> {
    let bar = ProgressBar::new(expected.max(1)).with_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40.green/blue} {pos}/{len} {per_sec} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut curve = vec![(0.0, 0)];
    let mut last_status = Instant::now();
    let mut statuses = statuses_of(cluster, ids).await?;
    loop {
        tokio::time::sleep(POLL).await;
        curve.push((since.elapsed().as_secs_f64(), accepted()));
        bar.set_position(accepted());
        if last_status.elapsed() >= Duration::from_millis(500) {
            statuses = statuses_of(cluster, ids).await?;
            last_status = Instant::now();
            let shown: Vec<&str> = statuses
                .iter()
                .map(|s| s["status"].as_str().unwrap_or("?"))
                .collect();
            bar.set_message(shown.join(" "));
            if statuses.iter().all(|s| !s["completed_at"].is_null()) {
                let sent: u64 = statuses
                    .iter()
                    .flat_map(|s| ["ios", "android"].map(|p| s["delivery"][p]["sent"].as_u64().unwrap_or(0)))
                    .sum();
                if accepted() >= sent {
                    curve.push((since.elapsed().as_secs_f64(), accepted()));
                    bar.finish_and_clear();
                    return Ok((curve, statuses));
                }
            }
        }
        if since.elapsed() > timeout {
            bar.abandon();
            bail!("not delivered after {timeout:?}: {statuses:?}");
        }
    }
}

async fn statuses_of(cluster: &LocalCluster, ids: &[String]) -> Result<Vec<Value>> {
    let mut statuses = Vec::with_capacity(ids.len());
    for id in ids {
        statuses.push(cluster.get(&format!("/api/v1/notifications/{id}")).await?);
    }
    Ok(statuses)
}

async fn wait_for(
    cluster: &LocalCluster,
    id: &str,
    timeout: Duration,
    done: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let started = Instant::now();
    loop {
        let status = cluster.get(&format!("/api/v1/notifications/{id}")).await?;
        if done(&status) {
            return Ok(status);
        }
        if started.elapsed() > timeout {
            bail!("timed out: {status}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Seconds until `q` of `total` was reached.
pub(crate) fn time_to(curve: &[(f64, u64)], total: u64, q: f64) -> Option<f64> {
    let needed = (q * total as f64).ceil() as u64;
    curve
        .iter()
        .find(|(_, n)| *n >= needed && total > 0)
        .map(|(t, _)| *t)
}

/// Pushes per second between 10% and 90% of `total`.
/// Pushes per second over the first `seconds` after the first accept.
fn first_seconds_rate(curve: &[(f64, u64)], seconds: f64) -> Option<f64> {
    let &(start, _) = curve.iter().find(|(_, accepted)| *accepted > 0)?;
    let &(end, accepted) = curve.iter().rev().find(|(t, _)| *t <= start + seconds)?;
    (end > start + seconds * 0.9).then(|| accepted as f64 / (end - start).max(1e-9))
}

/// CPU seconds this process has used so far.
pub(crate) fn own_cpu_s() -> f64 {
    usage(std::process::id()).map_or(0.0, |u| u.cpu_s)
}

fn sustained_rate(curve: &[(f64, u64)], total: u64) -> Option<f64> {
    let t10 = time_to(curve, total, 0.1)?;
    let t90 = time_to(curve, total, 0.9)?;
    (t90 > t10).then(|| 0.8 * total as f64 / (t90 - t10))
}

fn downsample(curve: &[(f64, u64)], total: u64, points: usize) -> Vec<(f64, f64)> {
    let step = (curve.len() / points.max(1)).max(1);
    let mut out: Vec<(f64, f64)> = curve
        .iter()
        .step_by(step)
        .map(|(t, n)| (*t, *n as f64 / total.max(1) as f64))
        .collect();
    if let Some((t, n)) = curve.last() {
        out.push((*t, *n as f64 / total.max(1) as f64));
    }
    out
}

/// The machine the benchmark runs on.
pub fn machine() -> Machine {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpu_model = read("/proc/cpuinfo")
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let memory_kib: f64 = read("/proc/meminfo")
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        cpu_model,
        memory_gib: (memory_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
    }
}

fn print_table(report: &Report) {
    let s = |v: Option<f64>| v.map_or("—".to_owned(), |v| format!("{v:.1} s"));
    println!("\n{}", report.name);
    println!(
        "  audience          {} ({} reachable)",
        report.audience, report.reachable
    );
    println!(
        "  t50 / t90 / t99 / t100   {} / {} / {} / {}",
        s(report.t50_s),
        s(report.t90_s),
        s(report.t99_s),
        s(report.t100_s)
    );
    println!(
        "  90in2             {}",
        if report.ninety_in_two { "yes" } else { "NO" }
    );
    let device = &report.device;
    println!(
        "  on phones         t50 / t90 / t99 {} / {} / {} ({} of {} panel phones received)",
        s(device.t50_s),
        s(device.t90_s),
        s(device.t99_s),
        device.received,
        device.reporting
    );
    println!(
        "  end to end        {:.0} pushes/s ({:.2} × ceiling)",
        report.pushes_per_s, report.end_to_end_ratio
    );
    if let (Some(rate), Some(ratio)) = (report.dispatcher_per_s, report.dispatcher_ratio) {
        println!("  dispatchers alone {rate:.0} pushes/s ({ratio:.2} × ceiling)");
    }
    println!("  ceiling           {:.0} pushes/s", report.ceiling_per_s);
    if let Some(web) = report.ceiling.webpush {
        println!(
            "    of which web    {:.0} pushes/s (minimal encrypting client)",
            web.per_s
        );
    }
    if let Some(efficiency) = report.efficiency {
        println!("  efficiency        {efficiency:.2} (0.9 × audience / ceiling, over t90)");
    }
    if let Some(efficiency) = report.platform_efficiency {
        println!("  by platform       {efficiency:.2} (each platform at its own ceiling)");
    }
    println!(
        "  load average      {:?} → {:?}",
        report.load_average_before, report.load_average_after
    );
    if let Some(ratio) = report.first_5s_ratio {
        println!("  first 5 s         {ratio:.2} × the sustained rate");
    }
    println!(
        "  CPU per push      dispatchers {:.1} µs, ceiling client {:.1} µs, mocks {:.1} µs; coordinator {:.2} µs a device",
        report.dispatcher_cpu_us_per_push,
        report.ceiling_cpu_us_per_push,
        report.mocks_cpu_us_per_push,
        report.coordinator_cpu_us_per_device
    );
    if let (Some(postgres), Some(rabbitmq)) =
        (report.postgres_cpu_us_per_push, report.rabbitmq_cpu_us_per_push)
    {
        println!("  services          PostgreSQL {postgres:.1} µs, RabbitMQ {rabbitmq:.1} µs a push");
    }
    if let Some(o) = report.overhead {
        println!(
            "  overhead          {:.2} µs a push: RabbitMQ {:.2}, PostgreSQL {:.2}, harvester {:.2}, coordinator {:.2}, dispatchers over the bare client {:+.2}",
            o.total_us,
            o.rabbitmq_us,
            o.postgres_us,
            o.harvester_us,
            o.coordinator_us,
            o.dispatcher_excess_us
        );
    }
    if let (Some(payloads), Some(batches)) = (report.payloads_prepared, report.batches_delivered) {
        println!("  payloads built    {payloads} for {batches} batches");
    }
    let p = &report.processes;
    for (name, usage) in [
        ("coordinator", p.coordinator),
        ("harvester", p.harvester),
        ("dispatcher ios", p.dispatcher_ios),
        ("dispatcher android", p.dispatcher_android),
        ("dispatcher web", p.dispatcher_web),
    ] {
        println!(
            "  {name:<18} peak RSS {:>7.1} MiB, CPU {:>6.1} s",
            usage.peak_rss_mib, usage.cpu_s
        );
    }
    println!(
        "  mocks                                  CPU {:>6.1} s",
        p.mocks_cpu_s
    );
}
