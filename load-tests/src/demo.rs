//! The demo (README command one): starts a coordinator, registers a
//! synthetic audience through the HTTP API, and reports the topic sizes the
//! coordinator counted. Later stages of the pipeline extend it until a real
//! notification goes out through the whole cluster.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use futures::{StreamExt, stream};
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

use crate::audience::{Layout, TOPICS, device};
use crate::process::{ServiceProcess, free_port};

const APP_KEY: &str = "demo-app-key";
const DESK_KEY: &str = "demo-desk-key";
/// Registrations in flight at once; enough to keep the coordinator busy
/// without queueing thousands of requests.
const CONCURRENCY: usize = 32;
const READY_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Parser)]
#[command(
    name = "clarion-demo",
    about = "Runs a local Clarion: starts the coordinator, registers a synthetic audience \
             through the API and reports what it counted"
)]
pub struct DemoArgs {
    /// Devices to register.
    #[arg(long, default_value_t = 2_000)]
    pub devices: u64,

    /// Share of iPhones in the audience, in percent.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub ios_percent: u8,

    /// Directory for the services' logs (default: `demo-logs` beside the binaries).
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
}

pub async fn run(args: DemoArgs) -> Result<()> {
    let log_dir = match args.log_dir {
        Some(dir) => dir,
        None => std::env::current_exe()?
            .parent()
            .context("the executable has no directory")?
            .join("demo-logs"),
    };
    let addr = format!("127.0.0.1:{}", free_port()?);
    let base = format!("http://{addr}");
    let keys = format!("{APP_KEY}=register,{DESK_KEY}=send");
    println!(
        "Starting the coordinator on {addr} (logs in {})",
        log_dir.display()
    );
    let mut coordinator = ServiceProcess::spawn(
        "coordinator",
        "clarion-coordinator",
        &[],
        &[("CLARION_HTTP_ADDR", addr.clone()), ("CLARION_API_KEYS", keys)],
        &log_dir,
    )?;
    let http = Client::new();
    wait_until_ready(&http, &base, &mut coordinator).await?;

    let started = Instant::now();
    let registered = register_audience(&http, &base, args.devices, args.ios_percent).await?;
    let elapsed = started.elapsed();
    println!(
        "Registered {registered} devices in {:.1} s ({:.0} registrations/s)\n",
        elapsed.as_secs_f64(),
        registered as f64 / elapsed.as_secs_f64().max(1e-9)
    );

    println!(
        "{:<18} {:>12} {:>10} {:>10}",
        "topic", "subscribers", "ios", "android"
    );
    for (topic, _) in TOPICS {
        let size: Value = http
            .get(format!("{base}/api/v1/topics/{topic}"))
            .bearer_auth(DESK_KEY)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let count = |field: &str| size[field].as_u64().unwrap_or_default();
        println!(
            "{:<18} {:>12} {:>10} {:>10}",
            topic,
            count("subscribers"),
            count("ios"),
            count("android")
        );
    }
    coordinator.stop();
    println!(
        "\nCoordinator stopped. Registrations stay in the `clarion` database; running again re-registers the same devices."
    );
    Ok(())
}

async fn wait_until_ready(http: &Client, base: &str, service: &mut ServiceProcess) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        service.ensure_running()?;
        if let Ok(response) = http.get(format!("{base}/readyz")).send().await
            && response.status() == StatusCode::OK
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} was not ready after {READY_TIMEOUT:?}; last log lines:\n{}",
                service.name,
                service.log_tail(20)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn register_audience(http: &Client, base: &str, devices: u64, ios_percent: u8) -> Result<u64> {
    let bar = ProgressBar::new(devices).with_style(
        ProgressStyle::with_template(
            "registering {bar:40.cyan/blue} {pos}/{len} devices ({per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let results: Vec<Result<()>> = stream::iter(0..devices)
        .map(|n| {
            let bar = bar.clone();
            async move {
                let device = device(n, ios_percent, Layout::News);
                let response = http
                    .put(format!("{base}/api/v1/registrations/{}", device.token))
                    .bearer_auth(APP_KEY)
                    .json(&json!({"platform": device.platform, "topics": device.topics}))
                    .send()
                    .await?;
                bar.inc(1);
                if !response.status().is_success() {
                    bail!(
                        "registration refused: {} {}",
                        response.status(),
                        response.text().await?
                    );
                }
                Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    bar.finish();
    let failures: Vec<_> = results.into_iter().filter_map(Result::err).collect();
    if let Some(first) = failures.first() {
        bail!("{} registrations failed; first: {first}", failures.len());
    }
    Ok(devices)
}
