//! The demo (README command one): a real notification through the whole
//! cluster to the mock APNs, FCM and web push service.
//!
//! Seeds a synthetic audience with `COPY` (phones and browsers), starts the
//! mocks (in this process), a coordinator, a harvester and one dispatcher
//! per platform (as processes), sends a breaking-news alert through the HTTP API, shows a
//! progress bar while it goes out, prints the report and stops everything
//! it started — or, with `--keep-running`, leaves the cluster up for the
//! newsroom console until Ctrl-C. With `--apps N`, each app gets its own
//! audience and its own mock Apple and Google, and one alert per app goes
//! out side by side; the browsers of every app share one mock push
//! service, as sites share the browsers' push services. With
//! `--live-activity`, a short football match follows as a Live Activity
//! (`demo/live_activity.rs`).

mod live_activity;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use clarion_proto::Platform;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use crate::audience::{AudienceShape, DEAD_PREFIX, Layout};
use crate::local_cluster::{
    ADMIN_KEY, APP_KEY, DESK_KEY, LocalCluster, LocalClusterConfig, delete_namespace,
};
use crate::mocks::{
    ApnsMock, ApnsMockConfig, FaultConfig, FcmMock, FcmMockConfig, OnOwnThread, ReceiptStats, ReceiptsConfig,
    WebPushMock, WebPushMockConfig, apps_file_table, start_on_own_thread,
};
use crate::seed::{SeedPlan, app_id, connect, prepare_database, seed, seed_web_subscriptions};

#[derive(Debug, Parser)]
#[command(
    name = "clarion-demo",
    about = "Runs a local Clarion end to end: seeds an audience, starts mock APNs/FCM/web push and \
             the cluster, sends a breaking-news notification and reports how it went out"
)]
pub struct DemoArgs {
    /// Devices in the audience.
    #[arg(long, default_value_t = 200_000)]
    pub devices: u64,

    /// Share of iPhones among the phones, in percent (the rest are Android).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub ios_percent: u8,

    /// Share of browsers (web push subscriptions) in the audience, in percent.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub web_percent: u8,

    /// Share of dead tokens (apps uninstalled), in percent.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub dead_percent: u8,

    /// Topics to send to (comma-separated); the audience follows
    /// breaking/uk, breaking/us, sport/football and weather/london, overlapping.
    #[arg(long, value_delimiter = ',', default_value = "breaking/uk,breaking/us")]
    pub topics: Vec<String>,

    /// Round-trip time the mocks add to every push, in milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub mock_latency_ms: f64,

    /// Database for the demo (created and migrated when missing; its
    /// registrations are replaced by the demo audience).
    #[arg(
        long,
        env = "CLARION_DATABASE_URL",
        default_value = "postgres://clarion:clarion@127.0.0.1:5432/clarion",
        hide_env_values = true
    )]
    pub database_url: String,

    /// RabbitMQ for the demo (its queues live in a namespace of their own,
    /// deleted afterwards).
    #[arg(
        long,
        env = "CLARION_AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f",
        hide_env_values = true
    )]
    pub amqp_url: String,

    /// Directory for the services' logs and the mocks' credentials
    /// (default: `demo-logs` beside the binaries).
    #[arg(long)]
    pub log_dir: Option<PathBuf>,

    /// Give up if the notification is not out after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,

    /// After the report, keep the cluster and the mocks running (until
    /// Ctrl-C) to try the newsroom console in a browser.
    #[arg(long)]
    pub keep_running: bool,

    /// Apps in the installation (1 to 4): `default`, then `app2`, … each
    /// with its own mock Apple and Google (another bundle id, APNs key,
    /// Firebase project) and an audience of `--devices` of its own; one
    /// notification per app goes out side by side.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4))]
    pub apps: u32,

    /// After the alert, run a short football match as a Live Activity:
    /// push-to-start tokens registered on sport/football, the activity
    /// started on them, three score updates and the final whistle
    /// broadcast on its channels, what the mock APNs recorded per channel.
    #[arg(long)]
    pub live_activity: bool,
}

pub async fn run(args: DemoArgs) -> Result<()> {
    let log_dir = match &args.log_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("the executable has no directory")?
            .join("demo-logs"),
    };
    std::fs::create_dir_all(&log_dir)?;

    println!(
        "Clarion demo: {} devices{}, {}% browsers, {}% of the phones iPhones, {}% dead tokens\n",
        args.devices,
        if args.apps > 1 {
            format!(" in each of {} apps", args.apps)
        } else {
            String::new()
        },
        args.web_percent,
        args.ios_percent,
        args.dead_percent
    );
    prepare_database(&args.database_url).await?;
    let client = connect(&args.database_url).await?;
    let plan = SeedPlan {
        devices: args.devices,
        shape: AudienceShape {
            web_percent: args.web_percent,
            ios_percent: args.ios_percent,
            dead_percent: args.dead_percent,
            layout: Layout::News,
            locales: 0,
        },
        fresh: true,
        apps: args.apps,
        // Every device reports receipts: the phones behind the mocks post
        // them to the coordinator (its address is chosen below for that),
        // and the report shows what the phones received beside what Apple
        // and Google accepted.
        receipts: true,
    };
    let seeded = seed(&client, &plan, true).await?;
    println!(
        "Seeded {} devices ({} registrations) in {:.1} s",
        seeded.devices,
        seeded.rows,
        seeded.elapsed.as_secs_f64()
    );

    let coordinator_addr = format!("127.0.0.1:{}", crate::process::free_port()?);
    let receipts = ReceiptsConfig::new(format!("http://{coordinator_addr}/api/v1/receipts"), APP_KEY);
    let mocks = AppMocks::start(
        &log_dir.join("mock-credentials"),
        args.apps,
        args.mock_latency_ms,
        receipts,
    )
    .await?;
    for (app, app_mocks) in mocks.apps.iter().enumerate() {
        println!(
            "{}: mock APNs on {} (production and sandbox) and mock FCM on {}",
            app_id(app as u32),
            app_mocks.apns.endpoint,
            app_mocks.fcm.endpoint
        );
    }
    // The browsers' subscriptions name the push service's port: written
    // now that it listens.
    let browsers = seed_web_subscriptions(&client, &plan, &mocks.web.origin).await?;
    println!(
        "every app: mock web push service on {} ({browsers} browsers subscribed)",
        mocks.web.origin
    );

    let namespace = format!("demo-{}", std::process::id());
    let config = LocalClusterConfig {
        database_url: args.database_url.clone(),
        amqp_url: args.amqp_url.clone(),
        namespace: namespace.clone(),
        harvesters: 1,
        coordinator_env: [
            mocks.coordinator_env(),
            vec![("CLARION_HTTP_ADDR".into(), coordinator_addr)],
        ]
        .concat(),
        harvester_env: Vec::new(),
        dispatcher_env: mocks.dispatcher_env(),
        log_dir: log_dir.clone(),
    };
    println!(
        "Starting the coordinator, a harvester and three dispatchers (iOS, Android, web; logs in {})",
        log_dir.display()
    );
    let mut cluster = LocalCluster::start(&config).await?;
    println!(
        "Newsroom console: {}/console/ (sign in with the newsroom's API key {DESK_KEY})",
        cluster.base
    );
    println!("{}", keys_text(&log_dir));
    let mut outcome = send_and_follow(&cluster, &args, &mocks).await;
    if outcome.is_ok() && args.live_activity {
        outcome = live_activity::run_match(&cluster, &mocks.apps[0].apns).await;
    }
    if outcome.is_ok() && args.keep_running {
        println!(
            "\nThe cluster keeps running for the console: open {}/console/ and sign in with {DESK_KEY}. \
             Ctrl-C stops everything.",
            cluster.base
        );
        println!("{}", try_the_api(&cluster.base));
        outcome = tokio::signal::ctrl_c().await.context("waiting for Ctrl-C");
    } else if outcome.is_ok() {
        let apps = if args.apps > 1 {
            format!(" --apps {}", args.apps)
        } else {
            String::new()
        };
        println!("\nRun `scripts/demo{apps} --keep-running` to keep the cluster up and try the console.");
    }
    cluster.stop();
    delete_namespace(&args.amqp_url, &namespace).await;
    outcome?;
    println!("\nEverything the demo started is stopped. Run it again to send again.");
    Ok(())
}

/// The keys the coordinator accepts, by name (the keys file names them).
fn keys_text(log_dir: &std::path::Path) -> String {
    format!(
        "API keys (named in {}): app {APP_KEY} (register devices), newsroom {DESK_KEY} (send), \
         ops {ADMIN_KEY} (admin: audit log, held tokens)",
        log_dir.join("keys.toml").display()
    )
}

/// Ready-to-paste calls to this run's coordinator (its port is picked
/// afresh each run, so the README's examples on 8080 need adjusting).
fn try_the_api(base: &str) -> String {
    let desk = format!("-H 'Authorization: Bearer {DESK_KEY}'");
    [
        "Try the API (this run's port):".to_owned(),
        format!("  curl -s {desk} {base}/api/v1/topics/breaking/uk"),
        format!(
            "  curl -s {desk} -H 'Content-Type: application/json' \\\n    \
             -d '{{\"topics\": [\"breaking/uk\"], \"title\": \"Hello\", \"body\": \"From the demo\"}}' \
             {base}/api/v1/notifications"
        ),
        format!("  curl -s {desk} '{base}/api/v1/notifications?limit=5'"),
        format!("  curl -s -H 'Authorization: Bearer {ADMIN_KEY}' {base}/api/v1/audit"),
    ]
    .join("\n")
}

async fn send_and_follow(cluster: &LocalCluster, args: &DemoArgs, mocks: &AppMocks) -> Result<()> {
    println!(
        "\n{:<8} {:<18} {:>12} {:>10} {:>10} {:>10}",
        "app", "topic", "subscribers", "ios", "android", "web"
    );
    for app in 0..args.apps {
        let app = app_id(app);
        for topic in &args.topics {
            let size = cluster.get(&format!("/api/v1/topics/{topic}?app={app}")).await?;
            let count = |field: &str| size[field].as_u64().unwrap_or_default();
            println!(
                "{:<8} {:<18} {:>12} {:>10} {:>10} {:>10}",
                app,
                topic,
                count("subscribers"),
                count("ios"),
                count("android"),
                count("web")
            );
        }
    }

    let started = Instant::now();
    let mut sends = Vec::new();
    for app in 0..args.apps {
        let app = app_id(app);
        let id = cluster
            .send(&json!({
                "app": app,
                "topics": args.topics,
                "title": "Breaking news",
                "body": "Something important just happened. Tap for the full story.",
                "link": "https://news.example/live",
                "collapse_key": "breaking",
                "priority": "high",
            }))
            .await?;
        println!(
            "\nSent notification {id} to {} of app {app}",
            args.topics.join(" + ")
        );
        println!("Follow it in the console: {}/console/#/n/{id}", cluster.base);
        sends.push((app, id));
    }
    println!();

    let bars = MultiProgress::new();
    let style = ProgressStyle::with_template(
        "{prefix:<8} {spinner} [{elapsed_precise}] {bar:40.green/blue} {pos}/{len} {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    let following: Vec<(String, String, ProgressBar)> = sends
        .into_iter()
        .map(|(app, id)| {
            let bar = bars.add(
                ProgressBar::new(1)
                    .with_style(style.clone())
                    .with_prefix(app.clone()),
            );
            (app, id, bar)
        })
        .collect();
    let timeout = Duration::from_secs(args.timeout_secs);
    let mut finished: Vec<Option<Value>> = vec![None; following.len()];
    while finished.iter().any(Option::is_none) {
        for ((_, id, bar), done) in following.iter().zip(finished.iter_mut()) {
            if done.is_some() {
                continue;
            }
            let status = cluster.get(&format!("/api/v1/notifications/{id}")).await?;
            let audience = status["audience"]["total"].as_u64().unwrap_or(0);
            bar.set_length(audience.max(1));
            bar.set_position(settled(&status));
            bar.set_message(format!(
                "{} · {} sent",
                status["status"].as_str().unwrap_or("?"),
                sum(&status, "sent")
            ));
            if !status["completed_at"].is_null() {
                bar.finish();
                *done = Some(status);
            } else if started.elapsed() > timeout {
                bar.abandon();
                bail!("notification {id} was not out after {timeout:?}: {status}");
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for ((app, _, _), (status, app_mocks)) in following.iter().zip(finished.iter().flatten().zip(&mocks.apps))
    {
        let status = with_device_figures(cluster, status).await;
        report(app, &status, app_mocks, &mocks.web, args.apps > 1);
    }
    Ok(())
}

/// The status once the phones' receipts reached 90% of the reporting
/// audience, or after [`RECEIPTS_PATIENCE`] (phones in a real audience
/// trickle in for minutes; the demo waits this long at most).
async fn with_device_figures(cluster: &LocalCluster, status: &Value) -> Value {
    const RECEIPTS_PATIENCE: Duration = Duration::from_secs(30);
    let started = Instant::now();
    let path = format!(
        "/api/v1/notifications/{}",
        status["id"].as_str().unwrap_or_default()
    );
    let mut latest = status.clone();
    while started.elapsed() < RECEIPTS_PATIENCE {
        if let Ok(fresh) = cluster.get(&path).await {
            latest = fresh;
        }
        if !latest["device"]["t90_ms"].is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    latest
}

/// Pushes with an outcome so far.
fn settled(status: &Value) -> u64 {
    [
        "sent",
        "failed",
        "invalid",
        "unregistered",
        "expired",
        "dry_run",
        "cancelled",
    ]
    .iter()
    .map(|field| sum(status, field))
    .sum()
}

fn sum(status: &Value, field: &str) -> u64 {
    Platform::ALL
        .iter()
        .map(|p| status["delivery"][p.as_str()][field].as_u64().unwrap_or(0))
        .sum()
}

/// The report of `app`'s send; `web_shared` when every app's browsers are
/// on `web_mock` (its figures are then the installation's).
fn report(app: &str, status: &Value, mocks: &Mocks, web_mock: &WebPushMock, web_shared: bool) {
    let audience = status["audience"]["total"].as_u64().unwrap_or(0);
    let seconds = |field: &str| -> String {
        status["timings"][field]
            .as_u64()
            .map_or("—".to_owned(), |ms| format!("{:.2} s", ms as f64 / 1000.0))
    };
    let apns = mocks.apns.state.accounting.stats();
    let fcm = mocks.fcm.state.accounting.stats();
    let web = web_mock.state.accounting.stats();
    let every_app = if web_shared { " (every app's)" } else { "" };
    println!(
        "\nNotification {} (app {app}): {}",
        status["id"].as_str().unwrap_or("?"),
        status["status"].as_str().unwrap_or("?")
    );
    println!(
        "  audience            {audience} devices (iOS {}, Android {}, web {}) in {} shard jobs",
        status["audience"]["ios"],
        status["audience"]["android"],
        status["audience"]["web"],
        status["jobs"]["done"]
    );
    println!(
        "  delivered           {} ({}%) — accepted by the mocks: APNs {}, FCM {}, web push {}{every_app}; \
         {} duplicates",
        sum(status, "sent"),
        status["delivered_percent"],
        apns.accepted,
        fcm.accepted,
        web.accepted,
        apns.duplicate_pushes + fcm.duplicate_pushes + web.duplicate_pushes
    );
    println!(
        "  to browsers         {} web pushes sent, each encrypted for its subscription (RFC 8291) and \
         opened by the mock push service",
        status["delivery"]["web"]["sent"].as_u64().unwrap_or(0)
    );
    println!(
        "  gone (cleaned up)   {} tokens reported gone, {} registrations deleted",
        sum(status, "unregistered"),
        status["cleanup"]["registrations_deleted"]
    );
    println!(
        "  invalid / failed    {} / {}",
        sum(status, "invalid"),
        sum(status, "failed")
    );
    println!(
        "  t50 / t90 / t99     {} / {} / {}  (from the send request)",
        seconds("t50_ms"),
        seconds("t90_ms"),
        seconds("t99_ms")
    );
    let verdict = match status["ninety_in_two"].as_bool() {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "not decided",
    };
    let device = &status["device"];
    let device_seconds = |field: &str| {
        device[field]
            .as_u64()
            .map_or("–".to_owned(), |ms| format!("{:.1} s", ms as f64 / 1000.0))
    };
    // Decided at two minutes; a t90 within them already says yes (those
    // receipts arrived before the two minutes are up).
    let device_verdict = match (device["ninety_in_two"].as_bool(), device["t90_ms"].as_u64()) {
        (Some(true), _) => "yes".to_owned(),
        (Some(false), _) => "NO".to_owned(),
        (None, Some(t90)) if t90 <= 120_000 => {
            "yes (t90 inside two minutes; fixed at two minutes)".to_owned()
        }
        (None, _) => "not decided (fixed two minutes after the send)".to_owned(),
    };
    println!(
        "  received on devices {} of {} reporting ({}%), opened {} ({}%)",
        device["received"],
        device["reporting"],
        device["received_percent"],
        device["opened"],
        device["opened_percent"]
    );
    let phones = [
        mocks.apns.state.receipts(),
        mocks.fcm.state.receipts(),
        web_mock.state.receipts(),
    ];
    let phones_sum = |field: fn(&ReceiptStats) -> u64| phones.iter().flatten().map(field).sum::<u64>();
    println!(
        "  devices' reports    {} receipts in {} requests ({} retries), {} still waiting, {} dropped, {} never reporting",
        phones_sum(|s| s.received + s.opened),
        phones_sum(|s| s.requests),
        phones_sum(|s| s.retries),
        phones_sum(|s| s.pending + s.in_flight),
        phones_sum(|s| s.dropped),
        phones_sum(|s| s.silent)
    );
    println!(
        "  t50 / t90 / t99     {} / {} / {}  (phones' receipts, from the send request)",
        device_seconds("t50_ms"),
        device_seconds("t90_ms"),
        device_seconds("t99_ms")
    );
    println!(
        "  90in2               {verdict} accepted by Apple/Google/push services · {device_verdict} received on devices"
    );
}

/// Both mocks, their shared CA file, and the faults of a realistic audience.
struct Mocks {
    apns: OnOwnThread<ApnsMock>,
    fcm: OnOwnThread<FcmMock>,
    ca_file: PathBuf,
}

/// Each app's mocks (the first app's are the `default` app's) and the
/// one web push service every app's browsers are on.
struct AppMocks {
    apps: Vec<Mocks>,
    web: OnOwnThread<WebPushMock>,
    /// The apps file naming every app but `default`.
    apps_file: PathBuf,
    /// Every mock's CA certificate.
    ca_file: PathBuf,
}

impl AppMocks {
    async fn start(dir: &Path, apps: u32, latency_ms: f64, receipts: ReceiptsConfig) -> Result<Self> {
        let web_config = WebPushMockConfig {
            receipts: Some(receipts.clone()),
            ..WebPushMockConfig::local(dir.to_path_buf())
        };
        let web = start_on_own_thread("mock-webpush", || WebPushMock::start(web_config)).await?;
        web.accept_seeded()?;
        web.state.faults.set(FaultConfig {
            dead_prefixes: vec![DEAD_PREFIX.into()],
            latency_ms,
            jitter_ms: latency_ms / 2.0,
            ..FaultConfig::default()
        });
        let mut started = Vec::new();
        let mut table = String::new();
        let mut bundle = std::fs::read_to_string(&web.ca_file)?;
        for app in 0..apps {
            let app_dir = dir.join(app_id(app));
            std::fs::create_dir_all(&app_dir)?;
            let mocks = Mocks::start(&app_dir, app, latency_ms, receipts.clone()).await?;
            if app > 0 {
                // One VAPID key for every app: the seeded browsers
                // subscribed with the push service's one server key.
                table.push_str(&apps_file_table(&app_id(app), &mocks.apns, &mocks.fcm));
                table.push_str(&web.app_table(&app_id(app)));
            }
            bundle.push_str(&std::fs::read_to_string(&mocks.ca_file)?);
            started.push(mocks);
        }
        let apps_file = dir.join("apps.toml");
        std::fs::write(&apps_file, table)?;
        let ca_file = dir.join("all-mocks-ca.pem");
        std::fs::write(&ca_file, bundle)?;
        Ok(Self {
            apps: started,
            web,
            apps_file,
            ca_file,
        })
    }

    fn coordinator_env(&self) -> Vec<(String, String)> {
        vec![("CLARION_APPS_FILE".into(), self.apps_file.display().to_string())]
    }

    /// The `default` app's mocks as the single-app settings, the others in
    /// the apps file, every CA trusted.
    fn dispatcher_env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = self.apps[0]
            .dispatcher_env()
            .into_iter()
            .filter(|(name, _)| name != "CLARION_EXTRA_CA_FILE")
            .collect();
        env.push(("CLARION_EXTRA_CA_FILE".into(), self.ca_file.display().to_string()));
        env.extend(self.web.env());
        env.extend(self.coordinator_env());
        env
    }
}

impl Mocks {
    /// The mocks of the `app`th app (another bundle id, key and project
    /// for each).
    async fn start(dir: &Path, app: u32, latency_ms: f64, receipts: ReceiptsConfig) -> Result<Self> {
        // Each on a thread of its own, as in the benchmark: the stand-ins
        // for Apple and Google should take as little of the machine as
        // they can.
        let local = ApnsMockConfig {
            receipts: Some(receipts.clone()),
            ..ApnsMockConfig::local(dir.to_path_buf())
        };
        let apns_config = match app {
            0 => local,
            n => ApnsMockConfig {
                bundle_id: format!("com.clarion.{}", app_id(n)),
                key_id: format!("CLARIONK{:02}", n + 1),
                ..local
            },
        };
        let apns = start_on_own_thread("mock-apns", || ApnsMock::start(apns_config)).await?;
        let local = FcmMockConfig {
            receipts: Some(receipts),
            ..FcmMockConfig::local(dir.to_path_buf())
        };
        let fcm_config = match app {
            0 => local,
            n => FcmMockConfig {
                project_id: format!("clarion-{}", app_id(n)),
                ..local
            },
        };
        let fcm = start_on_own_thread("mock-fcm", || FcmMock::start(fcm_config)).await?;
        let faults = FaultConfig {
            dead_prefixes: vec![DEAD_PREFIX.into()],
            latency_ms,
            jitter_ms: latency_ms / 2.0,
            ..FaultConfig::default()
        };
        apns.state.faults.set(faults.clone());
        fcm.state.faults.set(faults);
        let ca_file = dir.join("extra-ca.pem");
        let bundle = std::fs::read_to_string(&apns.ca_file)? + &std::fs::read_to_string(&fcm.ca_file)?;
        std::fs::write(&ca_file, bundle)?;
        Ok(Self { apns, fcm, ca_file })
    }

    fn dispatcher_env(&self) -> Vec<(String, String)> {
        let mut env = self.apns.env();
        env.push(("CLARION_APNS_SANDBOX_ENDPOINT".into(), self.apns.endpoint.clone()));
        env.extend(self.fcm.env());
        env.push(("CLARION_EXTRA_CA_FILE".into(), self.ca_file.display().to_string()));
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_says_which_key_is_which_and_how_to_call_this_run() {
        let keys = keys_text(std::path::Path::new("/tmp/demo-logs"));
        for named in [
            format!("app {APP_KEY}"),
            format!("newsroom {DESK_KEY}"),
            format!("ops {ADMIN_KEY} (admin"),
        ] {
            assert!(keys.contains(&named), "{keys}");
        }
        let calls = try_the_api("http://127.0.0.1:40123");
        let curls: Vec<&str> = calls.lines().filter(|line| line.contains("curl")).collect();
        assert_eq!(curls.len(), 4, "{calls}");
        assert!(
            calls.contains("http://127.0.0.1:40123/api/v1/notifications") && !calls.contains("8080"),
            "{calls}"
        );
        assert!(calls.contains(&format!("Bearer {ADMIN_KEY}")), "{calls}");
    }
}
