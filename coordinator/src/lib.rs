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
//! [`role`] says what a coordinator serves and runs (`--role api|control`,
//! both by default): [`start`] builds the whole service for its roles;
//! `main` and the integration tests both use it. It must run inside an
//! actix `System`.

pub mod api;
pub mod auth;
pub mod config;
pub mod console;
pub mod consumers;
pub mod error;
pub mod group_commit;
pub mod hygiene;
pub mod live_activity;
pub mod metrics;
pub mod migrations;
pub mod progress;
pub mod read_cache;
pub mod receipts;
pub mod release;
pub mod role;
pub mod send;
pub mod stop;
pub mod store;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::{App, HttpServer, web};
use clarion_proto::Names;
use clarion_runtime::amqp;
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
use crate::group_commit::GroupCommit;
use crate::group_commit::registrations::RegistrationWrite;
use crate::migrations::MigrationError;
use crate::receipts::write::ReceiptWrite;
use crate::role::Role;
use crate::role::loops::{ControlLoops, Links};

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
    /// The control role's loops, when it runs here.
    control: Option<ControlLoops>,
    /// Re-reads the API keys file, when the keys come from one.
    keys_file_watch: Option<tokio::task::JoinHandle<()>>,
    /// Listens to registration changes for the registration cache.
    registration_listener: Option<tokio::task::JoinHandle<()>>,
    /// The group commits of registration writes and receipts.
    registration_writes: Arc<GroupCommit<RegistrationWrite>>,
    receipt_writes: Arc<GroupCommit<ReceiptWrite>>,
    readiness: Readiness,
    grace: Duration,
}

impl Coordinator {
    /// The address the HTTP API listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops gracefully: not ready any more, no new connections, requests
    /// in flight finished, then the control role's loops stopped (the
    /// message being processed is finished first) within the grace period.
    pub async fn stop(self) {
        self.readiness.start_draining();
        self.server.stop(true).await;
        let _ = self.serving.await;
        // Every request is answered: no write waits for a batch any more.
        self.registration_writes.stop();
        self.receipt_writes.stop();
        if let Some(listener) = &self.registration_listener {
            listener.abort();
        }
        if let Some(watch) = &self.keys_file_watch {
            watch.abort();
        }
        if let Some(control) = self.control {
            control.stop(self.grace).await;
        }
        info!("coordinator stopped");
    }
}

/// Migrates the database, starts the actors of the roles it runs
/// (`settings.roles`) and the HTTP server.
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
    let roles = settings.roles;
    info!(%roles, "coordinator roles");
    migrations::run_when_reachable(&settings.database.url, &trust, DATABASE_STARTUP_PATIENCE).await?;
    let pool = db::pool(&settings.database, &trust, "clarion-coordinator")?;
    let names = Names::new(settings.broker.namespace.clone());
    // Only the control role talks to the broker (releases, reports,
    // cancels): an api-only coordinator opens no link and its readiness
    // does not wait for one.
    let broker = if roles.runs(Role::Control) {
        amqp::connect::check_tls(&settings.broker.url, &trust, LINK_CHECK_TIMEOUT).await?;
        Some(BrokerLink::spawn(
            settings.broker.url.clone(),
            trust.clone(),
            "clarion-coordinator".into(),
            names.clone(),
        ))
    } else {
        None
    };
    let (control_loops, control) = match &broker {
        Some(broker) => {
            let links = Links {
                pool: &pool,
                broker,
                names: &names,
                trust: &trust,
            };
            let (loops, control) = ControlLoops::start(&settings, links)?;
            (Some(loops), Some(control))
        }
        None => (None, None),
    };
    clarion_runtime::metrics::watch_pool(pool.clone(), "coordinator");

    let write_bounds = settings.writes.bounds(settings.database.pool_size);
    let registration_writes = Arc::new(GroupCommit::start(pool.clone(), write_bounds));
    let receipt_writes = Arc::new(GroupCommit::start(pool.clone(), write_bounds));
    let registration_reads =
        read_cache::registrations::RegistrationReads::new(settings.registration_cache_mib * 1024 * 1024);
    // Only the api role serves registration reads.
    let registration_listener = match registration_reads.enabled() && roles.runs(Role::Api) {
        true => Some(read_cache::listener::spawn(
            registration_reads.clone(),
            db::Manager::new(&settings.database, &trust, "clarion-coordinator-listener")?,
        )),
        false => None,
    };
    let state = web::Data::new(AppState {
        pool: pool.clone(),
        control,
        tokens_per_job: settings.tokens_per_job,
        valve: settings.valve(),
        names: names.clone(),
        max_topics_per_device: settings.max_topics_per_device,
        webpush_allowed_hosts: settings.webpush_allowed_hosts.clone(),
        topic_count_max_age: settings.topic_count_max_age(),
        openapi: api::served_document::ServedDocument::new(
            api::openapi::generated(settings.max_topics_per_device),
            apps.clone(),
        ),
        apps,
        registration_writes: registration_writes.clone(),
        registration_reads,
    });
    let status_snapshots = web::Data::new(api::notifications::StatusSnapshots::new(
        "status",
        settings.status_refresh(),
    ));
    let curve_snapshots = web::Data::new(api::curve::CurveSnapshots::new(
        "curve",
        settings.status_refresh(),
    ));
    let receipts_state = web::Data::new(receipts::ReceiptsState::new(
        pool.clone(),
        receipt_writes.clone(),
        settings.hygiene.plan().detail_retention,
    ));
    let console = web::Data::new(console::Console {
        pool: pool.clone(),
        settings: settings.console.clone(),
    });
    let keys = web::Data::new(api_keys);
    // Listen once the broker link is up, or after a few seconds: a probe
    // that came in the moment the port opened would otherwise get a 503
    // that only says the first connection is still being made (the one
    // 5xx a schemathesis run's metrics counted, issue 32).
    if let Some(broker) = &broker
        && tokio::time::timeout(FIRST_BROKER_LINK_PATIENCE, broker.connection())
            .await
            .is_err()
    {
        warn!(
            patience = ?FIRST_BROKER_LINK_PATIENCE,
            "the broker is not reachable yet; serving the API meanwhile (/readyz answers 503 until it is)"
        );
    }
    let readiness = Readiness::new(Some(pool), broker);
    let health = web::Data::new(readiness.clone());

    let mut server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(status_snapshots.clone())
            .app_data(curve_snapshots.clone())
            .app_data(keys.clone())
            .app_data(console.clone())
            .app_data(receipts_state.clone())
            .app_data(health.clone())
            .wrap(actix_web::middleware::from_fn(api::audit::audit_admin_use))
            .wrap(actix_web::middleware::from_fn(api::middleware::observe))
            .configure(|cfg| {
                if roles.runs(Role::Control) {
                    console::routes::configure(cfg);
                }
            })
            .configure(|cfg| api::routes::configure(cfg, roles))
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
        control: control_loops,
        keys_file_watch,
        registration_listener,
        registration_writes,
        receipt_writes,
        readiness,
        grace: settings.shutdown.grace(),
    })
}
