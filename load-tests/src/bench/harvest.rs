//! The harvest benchmark: seed N devices on one topic, send one
//! notification through a coordinator and a harvester (release processes),
//! drain the delivery queues the way dispatchers would, and measure how fast
//! the audience was harvested and how much memory the harvester needed.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clarion_proto::{Names, Platform};
use clarion_runtime::amqp::topology;
use futures::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use serde::Serialize;
use serde_json::json;

use super::{AudienceArgs, git_commit, load_audience, write_json};
use crate::audience::{AudienceShape, Layout};
use crate::local_cluster::LocalClusterConfig;
use crate::procinfo::{Usage, usage};

const HARVEST_TIMEOUT: Duration = Duration::from_secs(900);

#[derive(Debug, clap::Args)]
pub struct HarvestArgs {
    #[command(flatten)]
    pub audience: AudienceArgs,
    /// Harvest workers in the harvester (`CLARION_HARVEST_WORKERS`).
    #[arg(long, default_value_t = 4)]
    pub harvest_workers: u16,
    /// Tokens per published batch (`CLARION_BATCH_SIZE`).
    #[arg(long, default_value_t = 2000)]
    pub batch_size: u32,
    /// Tokens per shard job the coordinator plans (`CLARION_TOKENS_PER_JOB`).
    #[arg(long, default_value_t = 10_000)]
    pub tokens_per_job: u64,
    /// Where the JSON report goes (default `harvest-<devices>.json` in `--out-dir`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Directory of the report when `--out` is not given.
    #[arg(long, default_value_os_t = super::default_results_dir())]
    pub out_dir: PathBuf,
}

#[derive(Debug, Serialize)]
pub struct HarvestReport {
    pub devices: u64,
    pub seeded_rows: Option<u64>,
    pub seed_s: Option<f64>,
    pub jobs: u64,
    pub batches_received: u64,
    /// From the send request to the last job reported.
    pub harvest_s: f64,
    pub tokens_per_s: f64,
    pub harvester: Usage,
    pub coordinator: Usage,
    pub harvest_workers: u16,
    pub batch_size: u32,
    pub tokens_per_job: u64,
    pub cpus: usize,
    pub git_commit: Option<String>,
}

pub async fn run(args: HarvestArgs) -> Result<HarvestReport> {
    let shape = AudienceShape {
        web_percent: 0,
        ios_percent: 50,
        dead_percent: 0,
        layout: Layout::Single,
        locales: 0,
    };
    let (seeded_rows, seed_s) = load_audience(&args.audience, shape, 1).await?;
    let AudienceArgs {
        devices,
        ref database_url,
        ref amqp_url,
        ..
    } = args.audience;

    let namespace = format!("bench-{}", std::process::id());
    let names = Names::new(namespace.clone());
    let log_dir = super::bench_log_dir()?;
    let config = LocalClusterConfig {
        database_url: database_url.clone(),
        amqp_url: amqp_url.clone(),
        namespace,
        harvesters: 1,
        // No dispatchers report here: the job relay must release every job
        // at once instead of a few seconds of delivery.
        coordinator_env: std::iter::once((
            "CLARION_TOKENS_PER_JOB".to_owned(),
            args.tokens_per_job.to_string(),
        ))
        .chain(
            crate::bench::run::UNSCHEDULED
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        )
        .collect(),
        harvester_env: vec![
            ("CLARION_HARVEST_WORKERS".into(), args.harvest_workers.to_string()),
            ("CLARION_BATCH_SIZE".into(), args.batch_size.to_string()),
        ],
        dispatcher_env: Vec::new(),
        log_dir,
    };
    let mut cluster = crate::bench::start_cluster(&config).await?;
    // Warm the topic count so the plan is sized from it.
    let size = cluster.get("/api/v1/topics/breaking/uk").await?;
    println!("topic breaking/uk: {} subscribers", size["subscribers"]);

    let amqp = Connection::connect(amqp_url, ConnectionProperties::default()).await?;
    let batches = Arc::new(AtomicU64::new(0));
    for platform in Platform::ALL {
        let channel = amqp.create_channel().await?;
        topology::declare(&channel, &names).await?;
        channel.basic_qos(1000, BasicQosOptions::default()).await?;
        let mut consumer = channel
            .basic_consume(
                names.deliver_queue(platform).as_str().into(),
                format!("bench-drain-{platform}").into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await?;
        let batches = batches.clone();
        tokio::spawn(async move {
            while let Some(Ok(_)) = consumer.next().await {
                batches.fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    let started = Instant::now();
    let id = cluster
        .send(&json!({"topics": ["breaking/uk"], "title": "Benchmark", "body": "harvest benchmark"}))
        .await?;
    let status = loop {
        let status = cluster.get(&format!("/api/v1/notifications/{id}")).await?;
        match status["status"].as_str() {
            Some("dispatching") => break status,
            Some("failed") => bail!("the harvest failed: {status}"),
            _ if started.elapsed() > HARVEST_TIMEOUT => {
                bail!("no harvest after {HARVEST_TIMEOUT:?}: {status}")
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let harvest_s = started.elapsed().as_secs_f64();
    let harvested = status["audience"]["total"].as_u64().unwrap_or(0);
    let harvester = cluster.harvesters[0].pid().and_then(usage).unwrap_or_default();
    let coordinator = cluster.coordinator.pid().and_then(usage).unwrap_or_default();
    cluster.stop();

    let channel = amqp.create_channel().await?;
    topology::delete(&channel, &names).await?;
    let _ = amqp.close(200, "bench done".into()).await;

    if harvested != devices {
        bail!("harvested {harvested} devices of {devices}");
    }
    let report = HarvestReport {
        devices,
        seeded_rows,
        seed_s,
        jobs: status["jobs"]["done"].as_u64().unwrap_or(0),
        batches_received: batches.load(Ordering::Relaxed),
        harvest_s,
        tokens_per_s: harvested as f64 / harvest_s,
        harvester,
        coordinator,
        harvest_workers: args.harvest_workers,
        batch_size: args.batch_size,
        tokens_per_job: args.tokens_per_job,
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        git_commit: git_commit(),
    };
    let out = args
        .out
        .unwrap_or_else(|| args.out_dir.join(format!("harvest-{devices}.json")));
    write_json(&out, &report)?;
    println!(
        "harvested {} devices in {:.2} s: {:.0} tokens/s; harvester peak RSS {:.1} MiB, CPU {:.1} s; report in {}",
        harvested,
        harvest_s,
        report.tokens_per_s,
        harvester.peak_rss_mib,
        harvester.cpu_s,
        out.display()
    );
    Ok(report)
}
