//! Clarion's harvester: a pool of harvest workers that claim shard jobs,
//! stream their audience out of PostgreSQL through a bounded pool and
//! publish per-platform token batches. Each worker is one `QueueConsumer`
//! actor running the [`handlers::shard_jobs`] handler.
//!
//! The workers, their database pool and their broker connection all live on
//! one dedicated arbiter (thread); [`Harvester::kill`] stops it abruptly,
//! which is what a crash looks like to PostgreSQL and RabbitMQ.

pub mod batching;
pub mod config;
pub mod handlers;
pub mod harvest;
pub mod ledger;
pub mod metrics;
pub mod replica;

use std::time::Duration;

use actix::{Addr, Arbiter};
use clarion_proto::Names;
use clarion_runtime::amqp;
use clarion_runtime::amqp::consumer::{ConsumerSpec, QueueConsumer, stop_all};
use clarion_runtime::amqp::control::{Cancellations, subscribe};
use clarion_runtime::amqp::publisher::Publisher;
use clarion_runtime::health::{HealthServer, Readiness};
use clarion_runtime::pg_connect::PgTarget;
use clarion_runtime::telemetry::TraceService;
use clarion_runtime::tls::{LINK_CHECK_TIMEOUT, LinkError, TlsError, Trust};
use clarion_runtime::{BrokerLink, DatabaseSettings, PgPool, db};
use tokio::sync::oneshot;
use tracing::{info, warn};

pub use crate::config::Settings;
use crate::handlers::shard_jobs::ShardJobHandler;
use crate::harvest::HarvestContext;
use crate::replica::Replica;

/// How the harvester's spans are exported.
pub fn trace_service() -> TraceService {
    TraceService {
        name: "clarion-harvester",
        target: "clarion_harvester",
        attributes: Vec::new(),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Database(#[from] db::DbError),
    #[error("cannot serve the health endpoints: {0}")]
    Http(#[from] std::io::Error),
    #[error("the harvest arbiter did not start")]
    Arbiter,
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Link(#[from] LinkError),
}

/// A running harvester.
pub struct Harvester {
    pub health: HealthServer,
    arbiter: Arbiter,
    workers: Vec<Addr<QueueConsumer<ShardJobHandler>>>,
    readiness: Readiness,
    grace: Duration,
}

impl Harvester {
    /// Stops the harvest actors at once, dropping their broker connection
    /// and database connections mid-job (unacked jobs return to the queue).
    pub fn kill(&self) {
        self.arbiter.stop();
    }

    /// Stops gracefully: not ready any more, no new jobs, the jobs being
    /// harvested finished and acked within the grace period (what is left
    /// then goes back to the queue), then stops. True when nothing was cut.
    pub async fn stop(self) -> bool {
        self.readiness.start_draining();
        let finished = stop_all(&self.workers, self.grace).await;
        if !finished {
            warn!(
                grace_s = self.grace.as_secs(),
                "grace period over; unfinished jobs go back to the queue"
            );
        }
        self.kill();
        self.health.stop().await;
        info!("harvester stopped");
        finished
    }
}

type Parts = (PgPool, BrokerLink, Vec<Addr<QueueConsumer<ShardJobHandler>>>);

/// Starts the harvest actors on their own arbiter and serves the health
/// endpoints. Must run inside an actix `System`.
pub async fn start(settings: Settings) -> Result<Harvester, StartError> {
    metrics::describe();
    // A link that asks for TLS must work before anything starts.
    let trust = Trust::load(&settings.tls)?;
    PgTarget::new(&settings.database.url, &trust)
        .map_err(db::DbError::from)?
        .check_tls(LINK_CHECK_TIMEOUT)
        .await?;
    amqp::connect::check_tls(&settings.broker.url, &trust, LINK_CHECK_TIMEOUT).await?;
    let arbiter = Arbiter::new();
    let (tx, rx) = oneshot::channel::<Result<Parts, StartError>>();
    let spawned = {
        let settings = settings.clone();
        arbiter.spawn(async move {
            let _ = tx.send(start_workers(&settings, trust));
        })
    };
    if !spawned {
        return Err(StartError::Arbiter);
    }
    let (pool, link, workers) = rx.await.map_err(|_| StartError::Arbiter)??;
    let readiness = Readiness::new(Some(pool), Some(link));
    let health = HealthServer::start(settings.http_addr, readiness.clone())?;
    info!(
        addr = %health.addr,
        workers = settings.workers,
        batch_size = settings.batch_size,
        "harvester running"
    );
    Ok(Harvester {
        health,
        arbiter,
        workers,
        readiness,
        grace: settings.shutdown.grace(),
    })
}

/// Runs on the harvest arbiter: everything the actors use is created there.
fn start_workers(settings: &Settings, trust: Trust) -> Result<Parts, StartError> {
    let pool = db::pool(&settings.database, &trust, "clarion-harvester")?;
    clarion_runtime::metrics::watch_pool(pool.clone(), "harvester");
    let replica = match &settings.harvest_database_url {
        Some(url) => {
            let replica_settings = DatabaseSettings {
                url: url.clone(),
                ..settings.database.clone()
            };
            Some(Replica {
                pool: db::pool(&replica_settings, &trust, "clarion-harvester-replica")?,
                wait: Duration::from_millis(settings.replica_wait_ms),
            })
        }
        None => None,
    };
    let names = Names::new(settings.broker.namespace.clone());
    let link = BrokerLink::spawn(
        settings.broker.url.clone(),
        trust,
        "clarion-harvester".into(),
        names.clone(),
    );
    let cancellations = Cancellations::default();
    subscribe(link.clone(), names.clone(), cancellations.clone());
    let handler = ShardJobHandler {
        context: HarvestContext {
            pool: pool.clone(),
            publisher: Publisher::new(link.clone(), names.clone()),
            batch_size: settings.batch_size as usize,
            publish_window: settings.publish_window as usize,
            cancellations: cancellations.clone(),
            replica,
        },
        retry_delay: Duration::from_millis(settings.retry_delay_ms),
    };
    clarion_runtime::metrics::watch_queue(link.clone(), names.harvest_queue());
    let spec = ConsumerSpec {
        queue: names.harvest_queue(),
        prefetch: settings.prefetch,
        name: "harvester".into(),
    };
    let workers = QueueConsumer::start_pool(usize::from(settings.workers), link.clone(), spec, handler);
    Ok((pool, link, workers))
}
