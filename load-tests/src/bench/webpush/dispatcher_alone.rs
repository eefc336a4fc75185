//! The web dispatcher alone, fed as the pipeline feeds it: one notification
//! to an audience of browsers is harvested with no web dispatcher running,
//! so every batch waits on `deliver.web` in RabbitMQ; then one
//! `clarion-dispatcher --platform web` is started and timed from ready
//! until the mock push service has accepted every browser, its CPU read
//! from `/proc` over the same span.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clarion_proto::Platform;
use serde::Serialize;
use serde_json::json;

use crate::bench::AudienceArgs;
use crate::bench::run::UNSCHEDULED;
use crate::local_cluster::{LocalCluster, LocalClusterConfig, delete_namespace};
use crate::mocks::WebPushMock;
use crate::procinfo::user_and_system_s;

/// How often the status and the mock's counters are read.
const POLL: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, Serialize)]
pub struct DispatcherAlone {
    /// Browsers of the notification's audience.
    pub devices: u64,
    /// Pushes the mock accepted (a batch delivered twice counts twice).
    pub pushes: u64,
    /// From the dispatcher ready to the last browser accepted.
    pub seconds: f64,
    pub per_s: f64,
    pub user_s: f64,
    pub system_s: f64,
    pub cpu_us_per_push: f64,
    /// Seconds the harvest took to queue every batch (not timed above).
    pub queueing_s: f64,
}

pub async fn measure(
    audience: &AudienceArgs,
    mock: &WebPushMock,
    log_dir: std::path::PathBuf,
    timeout: Duration,
) -> Result<DispatcherAlone> {
    let namespace = format!("webpush-{}", std::process::id());
    let config = LocalClusterConfig {
        database_url: audience.database_url.clone(),
        amqp_url: audience.amqp_url.clone(),
        namespace: namespace.clone(),
        harvesters: 1,
        // Every job released at once: the whole audience queued.
        coordinator_env: UNSCHEDULED
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect(),
        harvester_env: Vec::new(),
        // None started with the cluster.
        dispatcher_env: Vec::new(),
        log_dir,
    };
    let mut cluster = crate::bench::start_cluster(&config).await?;
    let mut env = mock.env();
    env.push(("CLARION_EXTRA_CA_FILE".into(), mock.ca_file.display().to_string()));
    cluster.set_dispatcher_env(env);
    let outcome = timed(&mut cluster, mock, timeout).await;
    cluster.stop();
    delete_namespace(&audience.amqp_url, &namespace).await;
    outcome
}

async fn timed(cluster: &mut LocalCluster, mock: &WebPushMock, timeout: Duration) -> Result<DispatcherAlone> {
    let queueing = Instant::now();
    let id = cluster
        .send(&json!({"topics": ["breaking/uk"], "title": "Benchmark", "body": "web dispatcher alone"}))
        .await?;
    let devices = loop {
        let status = cluster.get(&format!("/api/v1/notifications/{id}")).await?;
        let jobs = &status["jobs"];
        let harvested = jobs["planned"].as_u64().is_some_and(|planned| {
            jobs["done"].as_u64().unwrap_or(0) + jobs["failed"].as_u64().unwrap_or(0) >= planned
        });
        if harvested {
            break status["audience"]["web"].as_u64().unwrap_or(0);
        }
        if queueing.elapsed() > timeout {
            bail!("the harvest did not queue every batch within {timeout:?}");
        }
        tokio::time::sleep(POLL).await;
    };
    if devices == 0 {
        bail!("the audience holds no browser");
    }
    let queueing_s = queueing.elapsed().as_secs_f64();
    mock.state.accounting.reset();
    cluster.start_dispatcher(Platform::Web).await?;
    let pid = cluster
        .dispatchers
        .last()
        .and_then(|d| d.pid())
        .context("the web dispatcher is not running")?;
    let (user_before, system_before) = user_and_system_s(pid).context("the dispatcher's CPU time")?;
    let started = Instant::now();
    while mock.state.accounting.counters().unique_tokens < devices {
        if started.elapsed() > timeout {
            bail!(
                "{} of {devices} browsers accepted after {timeout:?}",
                mock.state.accounting.counters().unique_tokens
            );
        }
        tokio::time::sleep(POLL).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let (user_after, system_after) = user_and_system_s(pid).context("the dispatcher's CPU time")?;
    let pushes = mock.state.accounting.counters().accepted;
    let (user_s, system_s) = (user_after - user_before, system_after - system_before);
    Ok(DispatcherAlone {
        devices,
        pushes,
        seconds,
        per_s: pushes as f64 / seconds.max(1e-9),
        user_s,
        system_s,
        cpu_us_per_push: (user_s + system_s) * 1e6 / pushes.max(1) as f64,
        queueing_s,
    })
}
