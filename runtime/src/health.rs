//! `GET /healthz` (the process is alive) and `GET /readyz` (its database and
//! broker are reachable, and whatever else the service adds as a
//! [`ReadinessCheck`]), served by every Clarion service.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix_web::{HttpResponse, get, web};
use serde::Serialize;
use tracing::warn;
use utoipa::ToSchema;

use crate::amqp::broker::BrokerLink;
use crate::db::{PgPool, ping};

/// A readiness probe must answer quickly even when the database hangs.
const DATABASE_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A service's own condition for being ready (the dispatcher's: it can
/// still push). Read on every `/readyz`, so it must answer at once.
pub trait ReadinessCheck: Send + Sync + 'static {
    /// The check's name in the answer.
    fn name(&self) -> &'static str;
    /// `Ok` when ready; otherwise a fixed status word and a sentence saying why.
    fn check(&self) -> Result<(), (&'static str, String)>;
}

/// What `/readyz` checks. Register it as app data (`web::Data<Readiness>`).
#[derive(Clone, Default)]
pub struct Readiness {
    database: Option<PgPool>,
    broker: Option<BrokerLink>,
    draining: Arc<AtomicBool>,
    others: Vec<Arc<dyn ReadinessCheck>>,
}

impl Readiness {
    pub fn new(database: Option<PgPool>, broker: Option<BrokerLink>) -> Self {
        Self {
            database,
            broker,
            draining: Arc::default(),
            others: Vec::new(),
        }
    }

    /// Adds a service's own check.
    pub fn with_check(mut self, check: Arc<dyn ReadinessCheck>) -> Self {
        self.others.push(check);
        self
    }

    /// From now on `/readyz` answers 503 so the load balancer stops sending
    /// work while the process finishes what it has.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }
}

/// Liveness and readiness answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct HealthBody {
    /// `ok`, `ready` or `not_ready`.
    pub status: &'static str,
    /// Each dependency with `ok` or why it is not.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<Check>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Check {
    pub name: &'static str,
    pub status: &'static str,
    /// Why it is not `ok`, when the check says more than its status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Adds `/healthz` and `/readyz` to an actix-web app.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(healthz).service(readyz);
}

/// The process is alive.
#[utoipa::path(tag = "health", responses((status = 200, body = HealthBody)))]
#[get("/healthz")]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(HealthBody {
        status: "ok",
        checks: vec![],
    })
}

/// The database and the broker are reachable and the process is not draining.
#[utoipa::path(
    tag = "health",
    responses((status = 200, body = HealthBody), (status = 503, body = HealthBody))
)]
#[get("/readyz")]
pub async fn readyz(readiness: web::Data<Readiness>) -> HttpResponse {
    let mut checks = Vec::new();
    if let Some(pool) = &readiness.database {
        let status = match tokio::time::timeout(DATABASE_PROBE_TIMEOUT, ping(pool)).await {
            Ok(Ok(())) => "ok",
            Ok(Err(err)) => {
                warn!(error = %err, "readiness: database unreachable");
                "unreachable"
            }
            Err(_) => "timeout",
        };
        checks.push(Check {
            name: "database",
            status,
            reason: None,
        });
    }
    if let Some(broker) = &readiness.broker {
        let status = if broker.is_connected() {
            "ok"
        } else {
            "disconnected"
        };
        checks.push(Check {
            name: "broker",
            status,
            reason: None,
        });
    }
    for check in &readiness.others {
        let (status, reason) = match check.check() {
            Ok(()) => ("ok", None),
            Err((status, reason)) => (status, Some(reason)),
        };
        checks.push(Check {
            name: check.name(),
            status,
            reason,
        });
    }
    if readiness.draining.load(Ordering::SeqCst) {
        checks.push(Check {
            name: "process",
            status: "draining",
            reason: None,
        });
    }
    let ready = checks.iter().all(|check| check.status == "ok");
    let body = HealthBody {
        status: if ready { "ready" } else { "not_ready" },
        checks,
    };
    if ready {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// A running HTTP server that only answers `/healthz`, `/readyz` and
/// `/metrics`; the harvester and the dispatcher use it (the coordinator
/// mounts the same routes in its API server).
pub struct HealthServer {
    pub addr: std::net::SocketAddr,
    handle: actix_web::dev::ServerHandle,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl HealthServer {
    /// Binds `addr` (port 0 picks a free port) with one worker thread.
    pub fn start(addr: std::net::SocketAddr, readiness: Readiness) -> std::io::Result<Self> {
        let readiness = web::Data::new(readiness);
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new()
                .app_data(readiness.clone())
                .configure(configure)
                .configure(crate::metrics::configure)
        })
        .workers(1)
        .disable_signals()
        .bind(addr)?;
        let addr = server.addrs().first().copied().unwrap_or(addr);
        let server = server.run();
        let handle = server.handle();
        let serving = actix_web::rt::spawn(server);
        Ok(Self {
            addr,
            handle,
            serving,
        })
    }

    pub async fn stop(self) {
        self.handle.stop(true).await;
        let _ = self.serving.await;
    }
}
