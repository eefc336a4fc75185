//! Benchmarks run against real processes: each writes its figures as JSON
//! under `bench-results/` beside its executable (in the cargo target
//! directory), or in `--out-dir` (`load-tests/results` for the committed set).

pub mod api_check;
pub mod ceiling;
pub mod chaos;
pub mod device_side;
pub mod dispatcher_cost;
pub mod harvest;
pub mod mocks;
pub mod overtake;
pub mod pacing;
pub mod perf_stat;
pub mod plot;
pub mod run;
pub mod scaling;
pub mod storm;
pub mod webpush;
pub mod write_load;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::audience::AudienceShape;
use crate::local_cluster::{LocalCluster, LocalClusterConfig};
use crate::seed::{SeedPlan, connect, prepare_database, recreate_database, seed};

/// Where a benchmark's audience lives and how it is loaded.
#[derive(Debug, Clone, clap::Args)]
pub struct AudienceArgs {
    /// Devices on the benchmark topic.
    #[arg(long, default_value_t = 1_000_000)]
    pub devices: u64,
    /// Benchmark database (created and migrated when missing).
    #[arg(
        long,
        env = "CLARION_BENCH_DATABASE_URL",
        default_value = "postgres://clarion:clarion@127.0.0.1:5432/clarion_bench"
    )]
    pub database_url: String,
    /// RabbitMQ the cluster uses.
    #[arg(
        long,
        env = "CLARION_AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub amqp_url: String,
    /// Keep the registrations already loaded when they hold exactly this audience.
    #[arg(long)]
    pub reuse: bool,
}

/// Prepares the benchmark database and seeds `args.devices` devices of
/// `shape` on `breaking/uk`, or keeps them with `--reuse` when the topic
/// already holds exactly that many. Returns the rows written and the
/// seconds it took (`None` when reused).
pub async fn load_audience(
    args: &AudienceArgs,
    shape: AudienceShape,
    apps: u32,
) -> Result<(Option<u64>, Option<f64>)> {
    prepare_database(&args.database_url).await?;
    let client = connect(&args.database_url).await?;
    // Reused only when it holds exactly this audience: every app's devices
    // on the topic, with as many distinct locales and browsers.
    let existing = client
        .query_one(
            "SELECT count(*), count(DISTINCT app), count(DISTINCT locale),
                    count(*) FILTER (WHERE platform = 'web')
               FROM registrations WHERE topic = 'breaking/uk'",
            &[],
        )
        .await?;
    let (rows, apps_there, locales_there, browsers_there): (i64, i64, i64, i64) =
        (existing.get(0), existing.get(1), existing.get(2), existing.get(3));
    let wanted = (args.devices * u64::from(apps)) as i64;
    let browsers = if args.reuse && shape.web_percent > 0 {
        (0..args.devices * u64::from(apps))
            .filter(|n| crate::audience::device(*n, shape).platform == clarion_proto::Platform::Web)
            .count() as i64
    } else {
        0
    };
    if args.reuse
        && (rows, apps_there, locales_there, browsers_there)
            == (wanted, i64::from(apps), i64::from(shape.locales), browsers)
    {
        println!("reusing {rows} registrations");
        vacuum(&client).await?;
        return Ok((None, None));
    }
    // A new audience gets a new database: its keys are the migrations'
    // own, whatever an earlier seed left.
    drop(client);
    recreate_database(&args.database_url).await?;
    let client = connect(&args.database_url).await?;
    let plan = SeedPlan {
        devices: args.devices,
        shape,
        fresh: true,
        apps,
        receipts: false,
    };
    let report = seed(&client, &plan, true).await?;
    vacuum(&client).await?;
    let seconds = report.elapsed.as_secs_f64();
    println!(
        "seeded {} devices ({} rows) in {seconds:.1} s ({:.0} rows/s)",
        report.devices,
        report.rows,
        report.rows as f64 / seconds
    );
    Ok((Some(report.rows), Some(seconds)))
}

/// What autovacuum does between sends, done before each run because a
/// server may run with it off (this one did): earlier runs' progress
/// updates leave dead rows in `notifications` and the delivery tables,
/// which every status read and relay round of the next run would wade
/// through, slower run after run.
async fn vacuum(client: &tokio_postgres::Client) -> Result<()> {
    client
        .batch_execute("VACUUM (ANALYZE)")
        .await
        .context("vacuuming the benchmark database")
}

/// The mock push services of a benchmark, each on a thread of its own.
pub struct BenchMocks {
    pub apns: crate::mocks::OnOwnThread<crate::mocks::ApnsMock>,
    pub fcm: crate::mocks::OnOwnThread<crate::mocks::FcmMock>,
    /// The web push service: every cluster runs a web dispatcher, as a
    /// deployment does, idle unless the audience has browsers.
    pub web: crate::mocks::OnOwnThread<crate::mocks::webpush::WebPushMock>,
}

impl BenchMocks {
    /// The dispatchers' settings for these mocks: endpoints, credentials
    /// and one CA file trusting all three; the mock FCM has no quota unless
    /// a benchmark gives it one (and then sets the dispatchers' share of it
    /// itself).
    pub fn dispatcher_env(&self, work: &std::path::Path) -> Result<crate::local_cluster::Env> {
        let ca_file = work.join("extra-ca.pem");
        let mut cas = String::new();
        for file in [&self.apns.ca_file, &self.fcm.ca_file, &self.web.ca_file] {
            cas += &std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        }
        std::fs::write(&ca_file, cas).with_context(|| format!("writing {}", ca_file.display()))?;
        let mut env = self.apns.env();
        env.push(("CLARION_APNS_SANDBOX_ENDPOINT".into(), self.apns.endpoint.clone()));
        env.extend(self.fcm.env());
        env.extend(self.web.env());
        env.push(("CLARION_EXTRA_CA_FILE".into(), ca_file.display().to_string()));
        env.push(("CLARION_FCM_QUOTA_PER_MINUTE".into(), "0".into()));
        Ok(env)
    }
}

/// The mock APNs, FCM and web push service for a benchmark (`mock-apns`,
/// `mock-fcm`, `mock-webpush`), credentials under `work`, keeping none of
/// the pushes they accept (that is for tests to read; here it would only
/// cost).
pub async fn start_mocks(work: &std::path::Path) -> Result<BenchMocks> {
    use crate::mocks::webpush::{WebPushMock, WebPushMockConfig};
    use crate::mocks::{ApnsMock, ApnsMockConfig, FcmMock, FcmMockConfig, start_on_own_thread};
    let apns_config = ApnsMockConfig::local(work.to_path_buf());
    let apns = start_on_own_thread("mock-apns", || ApnsMock::start(apns_config)).await?;
    let fcm_config = FcmMockConfig::local(work.to_path_buf());
    let fcm = start_on_own_thread("mock-fcm", || FcmMock::start(fcm_config)).await?;
    let web_config = WebPushMockConfig::local(work.to_path_buf());
    let web = start_on_own_thread("mock-webpush", || WebPushMock::start(web_config)).await?;
    for mock in [&apns.state, &fcm.state, &web.state] {
        mock.set_keeping(false);
    }
    Ok(BenchMocks { apns, fcm, web })
}

/// Starts the cluster of `config` for a benchmark and cancels the sends an
/// earlier, killed run left unfinished in its (reused) database, which
/// would otherwise hold back this run's sends.
pub async fn start_cluster(config: &LocalClusterConfig) -> Result<LocalCluster> {
    let cluster = LocalCluster::start(config).await?;
    let cancelled = cluster.cancel_unfinished().await?;
    if cancelled > 0 {
        println!("cancelled {cancelled} unfinished send(s) an earlier run left in the database");
    }
    Ok(cluster)
}

/// The one-harvester cluster a benchmark runs on `audience`'s servers,
/// every service with `settings`, the dispatchers with `dispatcher_env`
/// too, its queues under `namespace`.
pub fn cluster_config(
    audience: &AudienceArgs,
    settings: &crate::local_cluster::Env,
    dispatcher_env: crate::local_cluster::Env,
    namespace: &str,
    log_dir: PathBuf,
) -> LocalClusterConfig {
    LocalClusterConfig {
        database_url: audience.database_url.clone(),
        amqp_url: audience.amqp_url.clone(),
        namespace: namespace.to_owned(),
        harvesters: 1,
        coordinator_env: settings.clone(),
        harvester_env: settings.clone(),
        dispatcher_env,
        log_dir,
    }
}

/// Where the benchmarks write their results unless given `--out-dir`:
/// `bench-results` beside the benchmark's executable (under the cargo
/// target directory), so a trial run never replaces the committed results
/// of `load-tests/results/` (pass `--out-dir load-tests/results` for that).
pub fn default_results_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("bench-results")))
        .unwrap_or_else(|| PathBuf::from("target/bench-results"))
}

/// Where the benchmarks' cluster processes write their logs: `bench-logs`
/// beside the benchmark's executable.
pub fn bench_log_dir() -> Result<PathBuf> {
    Ok(std::env::current_exe()?
        .parent()
        .context("the executable has no directory")?
        .join("bench-logs"))
}

/// Writes `report` as pretty JSON to `path`, creating its directory.
pub fn write_json(path: &Path, report: &impl Serialize) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_vec_pretty(report)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// The commit the benchmark ran on, when run from a git checkout.
pub fn git_commit() -> Option<String> {
    let output = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// `/proc/loadavg`'s three averages (1, 5, 15 minutes; zeros when
/// unreadable): benchmarks quote them, as the machine may be shared.
pub fn load_average() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut fields = text.split_whitespace().map(|f| f.parse().unwrap_or(0.0));
    [(); 3].map(|_| fields.next().unwrap_or(0.0))
}
