//! `clarion-bench webpush`: the web dispatcher alone against the npm
//! `web-push` library (the reference implementation), both driving the
//! same mock web push service in one run, and the dispatcher's CPU per
//! push against the cost of encrypting one message. The goals:
//! the dispatcher at ≥ 10,000 pushes/s, ≥ 5× the library's best rate, and
//! within 1.5× of the encryption's CPU per message. Writes webpush.json.
//!
//! The mock opens only one push in `--decrypt-one-in` (every push is still
//! checked but for its body): decrypting is the browser's cost and would
//! take the machine the senders are measured on.

pub mod ceiling;
pub mod dispatcher_alone;
pub mod encryption;
pub mod npm;
pub mod share;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::audience::{AudienceShape, Layout};
use crate::bench::run::{Machine, machine};
use crate::bench::{AudienceArgs, bench_log_dir, default_results_dir, git_commit, load_audience, write_json};
use crate::mocks::{WebPushMock, WebPushMockConfig, start_on_own_thread};
use crate::seed::{SeedPlan, connect, seed_web_subscriptions};
use dispatcher_alone::DispatcherAlone;
use encryption::EncryptionCost;
use npm::NpmRun;

/// The goals.
const GOAL_PER_S: f64 = 10_000.0;
const GOAL_RATIO: f64 = 5.0;
const GOAL_CPU_OVER_ENCRYPTION: f64 = 1.5;
/// The mock's thread (its CPU is read by this name).
const MOCK_THREAD: &str = "mock-webpush";

#[derive(Debug, Clone, clap::Args)]
pub struct WebPushArgs {
    /// The audience (`--devices`, every one a browser) and where it lives.
    #[command(flatten)]
    pub audience: AudienceArgs,
    /// The mock opens one push in this many.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub decrypt_one_in: u32,
    /// Pushes per run of the web-push library.
    #[arg(long, default_value_t = 20_000)]
    pub npm_pushes: u64,
    /// The library's concurrencies (requests in flight), each run once.
    #[arg(long, value_delimiter = ',', default_value = "16,64,256")]
    pub npm_concurrency: Vec<usize>,
    /// A run of the library stops after this many seconds, pushes left or not.
    #[arg(long, default_value_t = 60)]
    pub npm_deadline_secs: u64,
    /// criterion's estimates of `webpush_cpu/per_message` (default: under
    /// the target directory this executable was built in).
    #[arg(long)]
    pub criterion_file: Option<PathBuf>,
    /// Give up when a phase takes longer than this.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    /// Name of the result file under `--out-dir`.
    #[arg(long, default_value = "webpush")]
    pub name: String,
    #[arg(long, default_value_os_t = default_results_dir())]
    pub out_dir: PathBuf,
}

#[derive(Debug, Serialize)]
pub struct WebPushReport {
    pub dispatcher: DispatcherAlone,
    /// Every run of the library, and its best.
    pub npm_runs: Vec<NpmRun>,
    pub npm_best: NpmRun,
    /// The dispatcher's rate over the library's best.
    pub ratio: f64,
    pub encryption: EncryptionCost,
    /// The dispatcher's CPU per push over the encryption's per message.
    pub cpu_over_encryption: f64,
    pub goals: Goals,
    pub decrypt_one_in: u32,
    /// CPU of the mock push service per push it accepted, while the
    /// dispatcher pushed and while the library did (the library signs a
    /// new VAPID JWT for every push, which the mock then verifies; the
    /// dispatcher's JWT is cached, and verified once).
    pub mock_cpu_us_per_push: MockCpu,
    /// `/proc/loadavg` (1, 5, 15 min) before and after: the box is shared.
    pub load_average_before: [f64; 3],
    pub load_average_after: [f64; 3],
    pub machine: Machine,
    pub git_commit: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct MockCpu {
    pub dispatcher_phase: f64,
    pub npm_phase: f64,
}

#[derive(Debug, Serialize)]
pub struct Goals {
    pub dispatcher_per_s: bool,
    pub ratio: bool,
    pub cpu_over_encryption: bool,
}

pub async fn run(args: WebPushArgs) -> Result<WebPushReport> {
    let load_average_before = crate::bench::load_average();
    let dir = npm::driver_dir();
    npm::ensure_installed(&dir).await?;
    let shape = AudienceShape {
        web_percent: 100,
        ios_percent: 0,
        dead_percent: 0,
        layout: Layout::Single,
        locales: 0,
    };
    load_audience(&args.audience, shape, 1).await?;
    let work = std::env::temp_dir().join(format!("clarion-webpush-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let outcome = measure(&args, shape, &work, &dir).await;
    let _ = std::fs::remove_dir_all(&work);
    let (dispatcher, npm_runs, encryption, mock_cpu_us_per_push) = outcome?;

    let npm_best = npm_runs
        .iter()
        .max_by(|a, b| a.per_s.total_cmp(&b.per_s))
        .cloned()
        .context("the web-push library did not run")?;
    let ratio = dispatcher.per_s / npm_best.per_s.max(1e-9);
    let cpu_over_encryption = dispatcher.cpu_us_per_push / encryption.reference_us().max(1e-9);
    let report = WebPushReport {
        goals: Goals {
            dispatcher_per_s: dispatcher.per_s >= GOAL_PER_S,
            ratio: ratio >= GOAL_RATIO,
            cpu_over_encryption: cpu_over_encryption <= GOAL_CPU_OVER_ENCRYPTION,
        },
        dispatcher,
        npm_runs,
        npm_best,
        ratio,
        encryption,
        cpu_over_encryption,
        decrypt_one_in: args.decrypt_one_in,
        mock_cpu_us_per_push,
        load_average_before,
        load_average_after: crate::bench::load_average(),
        machine: machine(),
        git_commit: git_commit(),
    };
    std::fs::create_dir_all(&args.out_dir)?;
    write_json(&args.out_dir.join(format!("{}.json", args.name)), &report)?;
    print_table(&report);
    Ok(report)
}

async fn measure(
    args: &WebPushArgs,
    shape: AudienceShape,
    work: &std::path::Path,
    dir: &std::path::Path,
) -> Result<(DispatcherAlone, Vec<NpmRun>, EncryptionCost, MockCpu)> {
    let config = WebPushMockConfig::local(work.to_path_buf());
    let mock = start_on_own_thread(MOCK_THREAD, || WebPushMock::start(config)).await?;
    mock.accept_seeded()?;
    mock.decrypt_one_in(args.decrypt_one_in);
    mock.state.set_keeping(false);
    let plan = SeedPlan {
        devices: args.audience.devices,
        shape,
        fresh: false,
        apps: 1,
        receipts: false,
    };
    let client = connect(&args.audience.database_url).await?;
    let browsers = seed_web_subscriptions(&client, &plan, &mock.origin).await?;
    println!(
        "{browsers} browsers subscribed on the mock push service {}",
        mock.origin
    );
    let mock_cpu = || crate::procinfo::own_threads_cpu_s(MOCK_THREAD);
    let mock_cpu_before = mock_cpu();
    let timeout = Duration::from_secs(args.timeout_secs);

    println!("the web dispatcher alone: queueing every batch first");
    let dispatcher =
        dispatcher_alone::measure(&args.audience, &mock, bench_log_dir()?.join(&args.name), timeout).await?;
    println!(
        "  {:.0} pushes/s, {:.1} CPU µs per push",
        dispatcher.per_s, dispatcher.cpu_us_per_push
    );
    let dispatcher_mock_cpu_s = mock_cpu() - mock_cpu_before;
    let mock_cpu_before = mock_cpu();
    let mut runs = Vec::new();
    for &concurrency in &args.npm_concurrency {
        println!("the web-push library, {concurrency} in flight");
        let run = npm::drive(
            dir,
            &mock,
            args.npm_pushes,
            concurrency.max(1),
            Duration::from_secs(args.npm_deadline_secs),
        )
        .await?;
        println!(
            "  {:.0} pushes/s, {:.1} CPU µs per push ({} failed)",
            run.per_s, run.cpu_us_per_push, run.failed
        );
        runs.push(run);
    }
    let npm_accepted: u64 = runs.iter().map(|run: &NpmRun| run.accepted).sum();
    let mock_cpu_us_per_push = MockCpu {
        dispatcher_phase: dispatcher_mock_cpu_s * 1e6 / dispatcher.pushes.max(1) as f64,
        npm_phase: (mock_cpu() - mock_cpu_before) * 1e6 / npm_accepted.max(1) as f64,
    };
    println!("encryption alone");
    let criterion_file = args
        .criterion_file
        .clone()
        .unwrap_or_else(encryption::default_criterion_file);
    let encryption = encryption::measure(&mock, &criterion_file).await?;
    Ok((dispatcher, runs, encryption, mock_cpu_us_per_push))
}

fn print_table(report: &WebPushReport) {
    let mark = |met: bool| if met { "met" } else { "NOT met" };
    let d = &report.dispatcher;
    let n = &report.npm_best;
    let e = &report.encryption;
    println!(
        "\nweb push: {} browsers, the mock opening one push in {}",
        d.devices, report.decrypt_one_in
    );
    println!(
        "  web dispatcher alone   {:>8.0} pushes/s  {:>6.1} CPU µs/push   (goal ≥ 10,000/s: {})",
        d.per_s,
        d.cpu_us_per_push,
        mark(report.goals.dispatcher_per_s)
    );
    println!(
        "  npm web-push (best, {:>3} in flight) {:>8.0} pushes/s  {:>6.1} CPU µs/push",
        n.concurrency, n.per_s, n.cpu_us_per_push
    );
    println!(
        "  ratio                  {:>8.1}×  (goal ≥ 5×: {})",
        report.ratio,
        mark(report.goals.ratio)
    );
    println!(
        "  encryption alone       criterion {} · same run {:.1} CPU µs/message",
        e.criterion_cpu_us_per_message
            .map_or("not run".to_owned(), |us| format!("{us:.1}")),
        e.same_run_cpu_us_per_message
    );
    println!(
        "  dispatcher / encryption {:>7.2}×  (goal ≤ 1.5×: {})",
        report.cpu_over_encryption,
        mark(report.goals.cpu_over_encryption)
    );
    println!(
        "  load average {:?} → {:?} on {} × {} (a shared box)",
        report.load_average_before, report.load_average_after, report.machine.cpus, report.machine.cpu_model
    );
}
