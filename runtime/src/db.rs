//! The bounded PostgreSQL connection pool (bb8 + tokio-postgres).
//!
//! The pool never opens more than `CLARION_DATABASE_POOL_SIZE` connections:
//! unbounded connections took a large news organisation's database down.

use bb8_postgres::PostgresConnectionManager;
use tokio_postgres::NoTls;

use crate::settings::DatabaseSettings;

pub type PgPool = bb8::Pool<PostgresConnectionManager<NoTls>>;
pub type PgConnection<'a> = bb8::PooledConnection<'a, PostgresConnectionManager<NoTls>>;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("invalid database URL: {0}")]
    Url(#[source] tokio_postgres::Error),
    #[error("no database connection available: {0}")]
    Pool(#[from] bb8::RunError<tokio_postgres::Error>),
    #[error("database query failed: {0}")]
    Query(#[from] tokio_postgres::Error),
}

/// Builds the pool without connecting yet: connections are opened on demand
/// (and re-opened after a database restart), so a service can start, report
/// "not ready" and recover by itself instead of crashing.
pub fn pool(settings: &DatabaseSettings, application_name: &str) -> Result<PgPool, DbError> {
    let mut config: tokio_postgres::Config = settings.url.parse().map_err(DbError::Url)?;
    config.application_name(application_name);
    let manager = PostgresConnectionManager::new(config, NoTls);
    Ok(bb8::Pool::builder()
        .max_size(settings.pool_size)
        .connection_timeout(settings.connect_timeout())
        .build_unchecked(manager))
}

/// Checks that a pooled connection answers a trivial query.
pub async fn ping(pool: &PgPool) -> Result<(), DbError> {
    let conn = pool.get().await?;
    conn.simple_query("SELECT 1").await?;
    Ok(())
}
