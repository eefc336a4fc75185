//! Clarion's coordinator: the HTTP API (registrations, topics,
//! notifications, scheduled sends, cancel), the schema and its migrations,
//! the job relay, the scheduler and the topic counter (its actors), and the
//! handlers of the reports, cleanup and dead-letter queues that turn
//! reports into progress and cleanups.
//!
//! One place per feature: [`send`] (accept, plan, `send_at`), [`release`]
//! (the job relay and the order and pace of release), [`consumers`] (the
//! queues' handlers), [`progress`], [`hygiene`], [`console`] and [`auth`];
//! [`api`] holds only the HTTP handlers and [`store`] only the SQL (it
//! imports nothing above it). Domain errors become HTTP answers only in
//! [`error`]; every metric is named in [`metrics`].
//!
//! [`start`] builds the whole service; `main` and the integration tests both
//! use it. It must run inside an actix `System`.

pub mod api;
pub mod auth;
pub mod config;
pub mod console;
pub mod consumers;
pub mod error;
pub mod hygiene;
pub mod metrics;
pub mod migrations;
pub mod progress;
pub mod receipts;
pub mod release;
pub mod send;
pub mod stop;
pub mod store;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr};
use actix_web::dev::ServerHandle;
use actix_web::{App, HttpServer, web};
use clarion_proto::Names;
use clarion_runtime::amqp;
use clarion_runtime::amqp::consumer::{ConsumerSpec, QueueConsumer, stop_recipients};
use clarion_runtime::amqp::publisher::Publisher;
use clarion_runtime::apps::AppsFile;
use clarion_runtime::health::Readiness;
use clarion_runtime::telemetry::TraceService;
use clarion_runtime::tls::{LINK_CHECK_TIMEOUT, LinkError, TlsError, Trust};
use clarion_runtime::{BrokerLink, db};
use tracing::{info, warn};

use crate::api::AppState;
use crate::auth::ApiKeys;
use crate::config::InitialKeys;
pub use crate::config::Settings;
use crate::consumers::cleanup::CleanupHandler;
use crate::consumers::dead_letters::DeadLetterHandler;
use crate::consumers::reports::ReportHandler;
use crate::hygiene::actor::Hygiene;
use crate::migrations::MigrationError;
use crate::progress::watchdog::Watchdog;
use crate::release::relay::JobRelay;
use crate::send::scheduler::Scheduler;
use crate::send::topic_counter::TopicCounter;
use crate::stop::Stop;

/// How the coordinator's spans are exported.
pub fn trace_service() -> TraceService {
    TraceService {
        name: "clarion-coordinator",
        target: "clarion_coordinator",
        attributes: Vec::new(),
    }
}

/// How long start-up waits for PostgreSQL to accept connections.
const DATABASE_STARTUP_PATIENCE: Duration = Duration::from_secs(30);
/// Longest the start waits for the first broker connection before it
/// listens anyway (a broker that is away is no reason not to serve: sends
/// are committed and published once it is back, and `/readyz` says so).
const FIRST_BROKER_LINK_PATIENCE: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No API keys, or keys that cannot be used.
    #[error("{0}")]
    ApiKeys(String),
    /// The apps file cannot be read or is not valid.
    #[error("{0}")]
    Apps(String),
    #[error(transparent)]
    Database(#[from] db::DbError),
    #[error(transparent)]
    Migrations(#[from] MigrationError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A running coordinator.
pub struct Coordinator {
    addr: SocketAddr,
    server: ServerHandle,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
    consumers: Consumers,
    relay: Addr<JobRelay>,
    scheduler: Addr<Scheduler>,
    watchdog: Addr<Watchdog>,
    hygiene: Addr<Hygiene>,
    /// Re-reads the API keys file, when the keys come from one.
    keys_file_watch: Option<tokio::task::JoinHandle<()>>,
    /// Counts reporting audiences and stores device-side verdicts.
    receipts_settler: tokio::task::JoinHandle<()>,
    readiness: Readiness,
    grace: Duration,
}

/// The coordinator's queue consumers; they run while their addresses live.
struct Consumers {
    reports: Vec<Addr<QueueConsumer<ReportHandler>>>,
    dead_letters: Vec<Addr<QueueConsumer<DeadLetterHandler>>>,
    cleanup: Vec<Addr<QueueConsumer<CleanupHandler>>>,
}

impl Coordinator {
    /// The address the HTTP API listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops gracefully: not ready any more, no new connections, requests
    /// in flight finished, then the consumers stopped (the message being
    /// processed is finished first) within the grace period.
    pub async fn stop(self) {
        self.readiness.start_draining();
        self.server.stop(true).await;
        let _ = self.serving.await;
        let _ = self.scheduler.send(Stop).await;
        let _ = self.relay.send(Stop).await;
        let _ = self.watchdog.send(Stop).await;
        let _ = self.hygiene.send(Stop).await;
        self.receipts_settler.abort();
        if let Some(watch) = &self.keys_file_watch {
            watch.abort();
        }
        let consumers = self.consumers.reports.iter().map(|a| a.clone().recipient());
        let consumers = consumers
            .chain(self.consumers.dead_letters.iter().map(|a| a.clone().recipient()))
            .chain(self.consumers.cleanup.iter().map(|a| a.clone().recipient()));
        if !stop_recipients(consumers, self.grace).await {
            warn!("grace period over; unfinished reports go back to the queue");
        }
        info!("coordinator stopped");
    }
}

/// Migrates the database, starts the actors and the HTTP server.
pub async fn start(settings: Settings) -> Result<Coordinator, StartError> {
    metrics::declare();
    receipts::observe::declare();
    let apps = Arc::new(AppsFile::open(settings.apps_file.as_deref()).map_err(StartError::Apps)?);
    let (keys, keys_file) = match settings.initial_keys().map_err(StartError::ApiKeys)? {
        InitialKeys::Listed(keys) => (keys, None),
        InitialKeys::File { path, keys, text } => (keys, Some((path, text))),
        InitialKeys::Development(keys) => {
            warn!(
                "development mode (--dev): no API keys configured, the well-known key `dev-admin-key` (scope admin) is accepted; never run like this in production"
            );
            (keys, None)
        }
    };
    let api_keys = ApiKeys::new(keys);
    let keys_file_watch = keys_file.map(|(path, text)| {
        info!(path = %path.display(), "API keys from a file, re-read when it changes");
        auth::file::watch(path, api_keys.clone(), text, settings.api_keys_file_poll())
    });
    let trust = Trust::load(&settings.tls)?;
    migrations::run_when_reachable(&settings.database.url, &trust, DATABASE_STARTUP_PATIENCE).await?;
    amqp::connect::check_tls(&settings.broker.url, &trust, LINK_CHECK_TIMEOUT).await?;
    let pool = db::pool(&settings.database, &trust, "clarion-coordinator")?;
    let names = Names::new(settings.broker.namespace.clone());
    let broker = BrokerLink::spawn(
        settings.broker.url.clone(),
        trust.clone(),
        "clarion-coordinator".into(),
        names.clone(),
    );

    let refresh_every = settings.topic_count_max_age() / 2;
    let topic_counter = TopicCounter::new(pool.clone(), refresh_every).start();
    let publisher = Publisher::new(broker.clone(), names.clone());
    let relay = JobRelay::new(pool.clone(), broker.clone(), names.clone(), settings.scheduling()).start();
    let scheduler = Scheduler::new(
        pool.clone(),
        topic_counter.clone(),
        relay.clone(),
        settings.tokens_per_job,
    )
    .start();
    let watchdog = Watchdog::new(pool.clone(), settings.stall()).start();
    let hygiene = Hygiene::new(
        db::Manager::new(&settings.database, &trust, "clarion-coordinator-hygiene")?,
        settings.hygiene.plan(),
        settings.hygiene.interval(),
    )
    .start();
    clarion_runtime::metrics::watch_queue(broker.clone(), names.reports_queue());
    clarion_runtime::metrics::watch_queue(broker.clone(), names.cleanup_queue());
    clarion_runtime::metrics::watch_pool(pool.clone(), "coordinator");
    let consumers = Consumers {
        reports: QueueConsumer::start_pool(
            1,
            broker.clone(),
            ConsumerSpec {
                queue: names.reports_queue(),
                prefetch: settings.reports_prefetch,
                name: "coordinator-reports".into(),
            },
            ReportHandler::start(pool.clone(), settings.valve(), settings.reports_prefetch),
        ),
        dead_letters: QueueConsumer::start_pool(
            1,
            broker.clone(),
            ConsumerSpec {
                queue: names.dead_letter_watch_queue(),
                prefetch: 16,
                name: "coordinator-dead-letters".into(),
            },
            DeadLetterHandler {
                pool: pool.clone(),
                valve: settings.valve(),
            },
        ),
        cleanup: QueueConsumer::start_pool(
            1,
            broker.clone(),
            ConsumerSpec {
                queue: names.cleanup_queue(),
                prefetch: settings.reports_prefetch,
                name: "coordinator-cleanup".into(),
            },
            CleanupHandler { pool: pool.clone() },
        ),
    };

    let state = web::Data::new(AppState {
        pool: pool.clone(),
        topic_counter,
        relay: relay.clone(),
        tokens_per_job: settings.tokens_per_job,
        valve: settings.valve(),
        publisher,
        names: names.clone(),
        max_topics_per_device: settings.max_topics_per_device,
        webpush_allowed_hosts: settings.webpush_allowed_hosts.clone(),
        topic_count_max_age: settings.topic_count_max_age(),
        openapi: api::served_document::ServedDocument::new(
            api::openapi::generated(settings.max_topics_per_device),
            apps.clone(),
        ),
        apps,
    });
    let receipts_state = web::Data::new(receipts::ReceiptsState::new(
        pool.clone(),
        settings.database.pool_size,
        settings.hygiene.plan().detail_retention,
    ));
    let receipts_settler = receipts::settle::spawn(pool.clone());
    let console = web::Data::new(console::Console {
        pool: pool.clone(),
        settings: settings.console.clone(),
    });
    let keys = web::Data::new(api_keys);
    // Listen once the broker link is up, or after a few seconds: a probe
    // that came in the moment the port opened would otherwise get a 503
    // that only says the first connection is still being made (the one
    // 5xx a schemathesis run's metrics counted, issue 32).
    if tokio::time::timeout(FIRST_BROKER_LINK_PATIENCE, broker.connection())
        .await
        .is_err()
    {
        warn!(
            patience = ?FIRST_BROKER_LINK_PATIENCE,
            "the broker is not reachable yet; serving the API meanwhile (/readyz answers 503 until it is)"
        );
    }
    let readiness = Readiness::new(Some(pool), Some(broker));
    let health = web::Data::new(readiness.clone());

    let mut server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(keys.clone())
            .app_data(console.clone())
            .app_data(receipts_state.clone())
            .app_data(health.clone())
            .wrap(actix_web::middleware::from_fn(api::audit::audit_admin_use))
            .wrap(actix_web::middleware::from_fn(api::middleware::observe))
            .configure(console::routes::configure)
            .configure(api::routes::configure)
    });
    // Signals are the binary's business (it stops the coordinator gracefully).
    server = server
        .disable_signals()
        .shutdown_timeout(settings.shutdown.grace_secs);
    if let Some(workers) = settings.http_workers {
        server = server.workers(workers.max(1));
    }
    let server = server
        .bind(settings.http_addr)
        .map_err(|source| StartError::Bind {
            addr: settings.http_addr,
            source,
        })?;
    let addr = server.addrs().first().copied().unwrap_or(settings.http_addr);
    let server = server.run();
    let handle = server.handle();
    let serving = actix_web::rt::spawn(server);
    info!(%addr, "coordinator listening");
    Ok(Coordinator {
        addr,
        server: handle,
        serving,
        consumers,
        relay,
        scheduler,
        watchdog,
        hygiene,
        keys_file_watch,
        receipts_settler,
        readiness,
        grace: settings.shutdown.grace(),
    })
}
