//! Versioned schema migrations (refinery, SQL files in `coordinator/migrations/`),
//! applied at start-up.
//!
//! Several coordinator replicas may start at once: each takes a PostgreSQL
//! advisory lock first, so exactly one applies the pending migrations and the
//! others find nothing left to do.
//!
//! The migration session is opened as the URL's `sslmode` says, like the
//! pool's; a failed TLS handshake ends the start at once (it will not fix
//! itself), while an unreachable database is waited for.

use std::time::{Duration, Instant};

use clarion_runtime::backoff::Backoff;
use clarion_runtime::pg_connect::{PgTarget, TargetError};
use clarion_runtime::tls::{LinkError, TlsError, Trust};
use tracing::{info, warn};

mod embedded {
    refinery::embed_migrations!("migrations");
}

/// Advisory lock key held while migrating ("Clarion" in ASCII).
const MIGRATION_LOCK_KEY: i64 = 0x0043_6c61_7269_6f6e;

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Tls(#[from] LinkError),
    #[error(transparent)]
    Trust(#[from] TlsError),
    #[error("cannot connect to PostgreSQL to migrate: {0}")]
    Connect(#[source] tokio_postgres::Error),
    #[error("cannot take the migration lock: {0}")]
    Lock(#[source] tokio_postgres::Error),
    #[error("migration failed: {0}")]
    Apply(#[from] refinery::Error),
}

/// Longest wait to open the migration connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a migration waits for a table lock.
const TABLE_LOCK_PATIENCE: Duration = Duration::from_secs(15);

/// Applies every pending migration, trusting the system roots only;
/// returns the names of those applied.
pub async fn run(database_url: &str) -> Result<Vec<String>, MigrationError> {
    let trust = Trust::load(&clarion_runtime::TlsSettings::default())?;
    run_with(database_url, &trust).await
}

/// Applies every pending migration over a session trusting what `trust`
/// trusts; returns the names of those applied.
pub async fn run_with(database_url: &str, trust: &Trust) -> Result<Vec<String>, MigrationError> {
    migrate(database_url, trust, refinery::Target::Latest).await
}

/// Applies the pending migrations up to `version` and no further (a test of
/// a later migration on rows an older schema stored); returns the names of
/// those applied.
pub async fn run_up_to(database_url: &str, version: u16) -> Result<Vec<String>, MigrationError> {
    let trust = Trust::load(&clarion_runtime::TlsSettings::default())?;
    migrate(database_url, &trust, refinery::Target::Version(version.into())).await
}

async fn migrate(
    database_url: &str,
    trust: &Trust,
    target_version: refinery::Target,
) -> Result<Vec<String>, MigrationError> {
    let mut target = PgTarget::new(database_url, trust)?;
    target.config_mut().connect_timeout(CONNECT_TIMEOUT);
    let (mut client, driver) = match target.connect().await {
        Ok(connected) => connected,
        Err(err) => {
            return Err(match target.tls_failure(&err) {
                Some(tls) => MigrationError::Tls(tls),
                None => MigrationError::Connect(err),
            });
        }
    };
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY])
        .await
        .map_err(MigrationError::Lock)?;
    // A schema change waiting for a table lock blocks every later query on
    // that table: give up (and fail the start, to be retried) rather than
    // stall the running service behind a long transaction.
    client
        .batch_execute(&format!(
            "SET lock_timeout = '{}s'",
            TABLE_LOCK_PATIENCE.as_secs()
        ))
        .await
        .map_err(MigrationError::Lock)?;
    let report = embedded::migrations::runner()
        .set_target(target_version)
        .run_async(&mut client)
        .await;
    // Closing the session releases the lock even if the unlock fails.
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY])
        .await;
    drop(client);
    let _ = driver.await;
    let applied = report?
        .applied_migrations()
        .iter()
        .map(|migration| migration.to_string())
        .collect();
    Ok(applied)
}

/// [`run`], retrying while PostgreSQL is unreachable for up to `patience`
/// (a database that starts alongside the coordinator). Other failures are
/// returned at once.
pub async fn run_when_reachable(
    database_url: &str,
    trust: &Trust,
    patience: Duration,
) -> Result<Vec<String>, MigrationError> {
    let deadline = Instant::now() + patience;
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
    loop {
        match run_with(database_url, trust).await {
            Err(MigrationError::Connect(err)) if Instant::now() < deadline => {
                let delay = backoff.next_delay();
                warn!(error = %err, retry_in_ms = delay.as_millis() as u64, "database not reachable yet");
                tokio::time::sleep(delay).await;
            }
            Ok(applied) => {
                if applied.is_empty() {
                    info!("database schema is up to date");
                } else {
                    info!(migrations = ?applied, "applied database migrations");
                }
                return Ok(applied);
            }
            Err(err) => return Err(err),
        }
    }
}
