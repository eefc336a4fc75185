//! `clarion-bench write-load`: a bounded load of the app-facing writes
//! against a running coordinator — registration `PUT`s (a new token with
//! two topics each) or receipts (`--batch` per request) — from
//! `--clients` concurrent clients for `--seconds` after a warm-up; prints
//! the rate and the latency percentiles. Measures the group commit's write
//! path (issue 36); the storm benchmark is where the targets are judged.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::future::join_all;
use hdrhistogram::Histogram;
use serde_json::{Value, json};

/// What the clients write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WriteKind {
    /// `PUT /api/v1/registrations/{new token}` with two topics.
    Put,
    /// `POST /api/v1/receipts` with `--batch` receipts of distinct devices.
    Receipts,
}

#[derive(Debug, Clone, clap::Args)]
pub struct WriteLoadArgs {
    /// The coordinator's API base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// An API key with the `register` scope.
    #[arg(long)]
    pub register_key: String,
    /// An API key with the `send` scope (receipts: the notifications sent).
    #[arg(long)]
    pub send_key: Option<String>,
    #[arg(long, value_enum, default_value = "put")]
    pub kind: WriteKind,
    /// Concurrent clients (each one request at a time).
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 15)]
    pub seconds: u64,
    #[arg(long, default_value_t = 3)]
    pub warmup_seconds: u64,
    /// Receipts per request.
    #[arg(long, default_value_t = 50)]
    pub batch: usize,
    /// Receipts: devices registered (reporting receipts) before the load.
    #[arg(long, default_value_t = 20_000)]
    pub devices: u64,
    /// Receipts: notifications sent to them; the receipts cycle over every
    /// (notification, device) pair (beyond: duplicates).
    #[arg(long, default_value_t = 40)]
    pub notifications: u64,
}

/// What the measured window saw.
#[derive(Debug, Default)]
struct Tally {
    ok: u64,
    failed: u64,
    items: u64,
    accepted: u64,
    duplicates: u64,
    ignored: u64,
}

const TOPIC: &str = "load/r";

fn token(run: u32, n: u64) -> String {
    format!("{run:08x}{n:056x}")
}

pub async fn run(args: WriteLoadArgs) -> Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(args.clients)
        .build()?;
    let run_id: u32 = rand::random();
    let notifications = match args.kind {
        WriteKind::Put => Vec::new(),
        WriteKind::Receipts => prepare_receipts(&client, &args, run_id).await?,
    };
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let measured_from = started + Duration::from_secs(args.warmup_seconds);
    let until = measured_from + Duration::from_secs(args.seconds);
    let clients = (0..args.clients).map(|_| {
        let (client, args, next, notifications) =
            (client.clone(), args.clone(), next.clone(), notifications.clone());
        async move {
            let mut latency = Histogram::<u64>::new(3).expect("3 significant digits is valid");
            let mut tally = Tally::default();
            while Instant::now() < until {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let sent = Instant::now();
                let (ok, answer) = one_request(&client, &args, run_id, n, &notifications).await;
                if sent < measured_from {
                    continue;
                }
                let _ = latency.record(sent.elapsed().as_micros() as u64);
                if ok {
                    tally.ok += 1;
                    tally.items += if args.kind == WriteKind::Receipts {
                        args.batch as u64
                    } else {
                        1
                    };
                } else {
                    tally.failed += 1;
                }
                let field = |name: &str| answer.as_ref().and_then(|a| a[name].as_u64()).unwrap_or(0);
                tally.accepted += field("accepted");
                tally.duplicates += field("duplicates");
                tally.ignored += field("ignored");
            }
            (latency, tally)
        }
    });
    let results = join_all(clients).await;
    let mut latency = Histogram::<u64>::new(3).expect("3 significant digits is valid");
    let mut total = Tally::default();
    for (histogram, tally) in results {
        latency.add(histogram).context("latency histograms")?;
        total.ok += tally.ok;
        total.failed += tally.failed;
        total.items += tally.items;
        total.accepted += tally.accepted;
        total.duplicates += tally.duplicates;
        total.ignored += tally.ignored;
    }
    let seconds = args.seconds as f64;
    println!(
        "{:?}: {} clients, {} s: {:.0} requests/s, {:.0} items/s, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; \
         ok {}, failed {}; accepted {}, duplicates {}, ignored {}",
        args.kind,
        args.clients,
        args.seconds,
        total.ok as f64 / seconds,
        total.items as f64 / seconds,
        latency.value_at_quantile(0.5) as f64 / 1000.0,
        latency.value_at_quantile(0.99) as f64 / 1000.0,
        latency.max() as f64 / 1000.0,
        total.ok,
        total.failed,
        total.accepted,
        total.duplicates,
        total.ignored,
    );
    Ok(())
}

/// Request number `n`; whether it was answered 2xx, and its JSON answer.
async fn one_request(
    client: &reqwest::Client,
    args: &WriteLoadArgs,
    run_id: u32,
    n: u64,
    notifications: &[String],
) -> (bool, Option<Value>) {
    let request = match args.kind {
        WriteKind::Put => client
            .put(format!("{}/api/v1/registrations/{}", args.url, token(run_id, n)))
            .json(&json!({"platform": "ios", "topics": ["load/a", "load/b"]})),
        WriteKind::Receipts => {
            let receipts: Vec<Value> = (0..args.batch as u64)
                .map(|i| {
                    let pair = n * args.batch as u64 + i;
                    let device = pair % args.devices;
                    let notification = &notifications[((pair / args.devices) as usize) % notifications.len()];
                    json!({"notification_id": notification, "token": token(run_id, device), "event": "received"})
                })
                .collect();
            client
                .post(format!("{}/api/v1/receipts", args.url))
                .json(&json!({ "receipts": receipts }))
        }
    };
    match request.bearer_auth(&args.register_key).send().await {
        Ok(response) => {
            let ok = response.status().is_success();
            (ok, response.json::<Value>().await.ok())
        }
        Err(_) => (false, None),
    }
}

/// Registers `--devices` devices reporting receipts and sends
/// `--notifications` notifications to them; returns their ids.
async fn prepare_receipts(
    client: &reqwest::Client,
    args: &WriteLoadArgs,
    run_id: u32,
) -> Result<Vec<String>> {
    let Some(send_key) = &args.send_key else {
        bail!("receipts need --send-key");
    };
    let next = Arc::new(AtomicU64::new(0));
    let registering = (0..args.clients).map(|_| {
        let (client, next) = (client.clone(), next.clone());
        async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= args.devices {
                    return Ok::<(), anyhow::Error>(());
                }
                let response = client
                    .put(format!("{}/api/v1/registrations/{}", args.url, token(run_id, n)))
                    .bearer_auth(&args.register_key)
                    .json(&json!({"platform": "ios", "topics": [TOPIC], "receipts": true}))
                    .send()
                    .await?;
                if !response.status().is_success() {
                    bail!("registering a device: {}", response.status());
                }
            }
        }
    });
    for registered in join_all(registering).await {
        registered?;
    }
    let mut ids = Vec::new();
    for _ in 0..args.notifications {
        let answer: Value = client
            .post(format!("{}/api/v1/notifications", args.url))
            .bearer_auth(send_key)
            .json(&json!({"topics": [TOPIC], "body": "write load"}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        ids.push(
            answer["id"]
                .as_str()
                .context("a notification id in the answer")?
                .to_owned(),
        );
    }
    Ok(ids)
}
