//! The bounded PostgreSQL connection pool (bb8 + tokio-postgres), with a
//! deadline on everything that could otherwise wait forever.
//!
//! The pool never opens more than `CLARION_DATABASE_POOL_SIZE` connections:
//! unbounded connections took a large news organisation's database down.
//! Deadlines (`CLARION_DATABASE_*`):
//! - opening a connection — TCP, start-up and authentication together — is
//!   given up after the connect timeout (tokio-postgres' own
//!   `connect_timeout` covers only the TCP connect, so a server that takes
//!   the connection and never answers the start-up would hold a pool slot
//!   for good);
//! - TCP keepalives and `TCP_USER_TIMEOUT` drop a connection whose server
//!   went silent, idle or mid-query;
//! - each session runs with `statement_timeout` and
//!   `idle_in_transaction_session_timeout`, so PostgreSQL itself ends a
//!   runaway statement or a transaction left open by a stuck caller.
//!
//! Plain text or TLS as the URL's `sslmode` says: see [`crate::pg_connect`].

use std::time::Duration;

use tokio_postgres::Client;

use crate::pg_connect::{PgTarget, TargetError};
use crate::settings::DatabaseSettings;
use crate::tls::Trust;

pub type PgPool = bb8::Pool<Manager>;
pub type PgConnection<'a> = bb8::PooledConnection<'a, Manager>;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("no database connection available: {0}")]
    Pool(#[from] bb8::RunError<ConnectError>),
    #[error("database query failed: {0}")]
    Query(#[from] tokio_postgres::Error),
}

/// Why the pool could not open (or re-check) a connection.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("{0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[error("no answer from PostgreSQL within {0:?}")]
    Timeout(Duration),
}

/// Opens and checks the pool's connections, each within the connect
/// timeout.
pub struct Manager {
    target: PgTarget,
    connect_timeout: Duration,
}

impl Manager {
    /// The connection settings `settings` describe, for `application_name`.
    pub fn new(settings: &DatabaseSettings, trust: &Trust, application_name: &str) -> Result<Self, DbError> {
        let mut target = PgTarget::new(&settings.url, trust)?;
        let config = target.config_mut();
        config
            .application_name(application_name)
            .connect_timeout(settings.connect_timeout())
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(settings.keepalive_idle_secs))
            .keepalives_interval(Duration::from_secs(settings.keepalive_interval_secs))
            .keepalives_retries(settings.keepalive_probes)
            .tcp_user_timeout(settings.dead_peer_timeout());
        // Options given in the URL come last, so they win.
        let options = match config.get_options() {
            Some(given) => format!("{} {given}", settings.session_options()),
            None => settings.session_options(),
        };
        config.options(options);
        Ok(Self {
            target,
            connect_timeout: settings.connect_timeout(),
        })
    }
}

impl Manager {
    /// A session of its own (not from the pool) whose `LISTEN`
    /// notifications come through the receiver (see
    /// [`PgTarget::connect_listening`](crate::pg_connect::PgTarget::connect_listening)),
    /// opened within the connect timeout.
    pub async fn connect_listening(
        &self,
        capacity: usize,
    ) -> Result<(Client, tokio::sync::mpsc::Receiver<tokio_postgres::Notification>), ConnectError> {
        tokio::time::timeout(self.connect_timeout, self.target.connect_listening(capacity))
            .await
            .map_err(|_| ConnectError::Timeout(self.connect_timeout))?
            .map_err(ConnectError::from)
    }
}

impl bb8::ManageConnection for Manager {
    type Connection = Client;
    type Error = ConnectError;

    async fn connect(&self) -> Result<Client, ConnectError> {
        let (client, _driver) = tokio::time::timeout(self.connect_timeout, self.target.connect())
            .await
            .map_err(|_| ConnectError::Timeout(self.connect_timeout))??;
        Ok(client)
    }

    async fn is_valid(&self, client: &mut Client) -> Result<(), ConnectError> {
        tokio::time::timeout(self.connect_timeout, client.simple_query(""))
            .await
            .map_err(|_| ConnectError::Timeout(self.connect_timeout))??;
        Ok(())
    }

    fn has_broken(&self, client: &mut Client) -> bool {
        client.is_closed()
    }
}

/// Builds the pool without connecting yet: connections are opened on demand
/// (and re-opened after a database restart), so a service can start, report
/// "not ready" and recover by itself instead of crashing.
pub fn pool(settings: &DatabaseSettings, trust: &Trust, application_name: &str) -> Result<PgPool, DbError> {
    let manager = Manager::new(settings, trust, application_name)?;
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

#[cfg(test)]
mod tests {
    //! Against the machine's PostgreSQL (`CLARION_TEST_DATABASE_URL`).

    use std::time::Instant;

    use tokio::net::TcpListener;

    use super::*;

    fn trust() -> Trust {
        Trust::load(&crate::settings::TlsSettings::default()).unwrap()
    }

    fn database_url() -> String {
        std::env::var("CLARION_TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://clarion:clarion@127.0.0.1:5432/postgres".to_owned())
    }

    #[tokio::test]
    async fn a_statement_longer_than_the_statement_timeout_is_cancelled() {
        let settings = DatabaseSettings {
            statement_timeout_secs: 1,
            ..DatabaseSettings::new(database_url())
        };
        let pool = pool(&settings, &trust(), "clarion-db-test").unwrap();
        let conn = pool.get().await.expect("a connection");
        let started = Instant::now();
        // The outer bound only keeps a regression from hanging the suite.
        let answer = tokio::time::timeout(Duration::from_secs(30), conn.simple_query("SELECT pg_sleep(20)"))
            .await
            .expect("PostgreSQL ended the statement by itself");
        let error = answer.expect_err("the sleep outlived its deadline");
        let code = error.code().expect("a server error");
        assert_eq!(code, &tokio_postgres::error::SqlState::QUERY_CANCELED, "{error}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        // The connection survives a cancelled statement.
        conn.simple_query("SELECT 1").await.expect("the session goes on");
    }

    #[tokio::test]
    async fn sessions_carry_the_deadlines_and_url_options_win() {
        let url = format!(
            "{}?options=-c%20idle_in_transaction_session_timeout%3D7s",
            database_url()
        );
        let settings = DatabaseSettings {
            statement_timeout_secs: 42,
            ..DatabaseSettings::new(url)
        };
        let pool = pool(&settings, &trust(), "clarion-db-test").unwrap();
        let conn = pool.get().await.expect("a connection");
        let shown = |row: &tokio_postgres::Row| row.get::<_, String>(0);
        let statement = conn.query_one("SHOW statement_timeout", &[]).await.unwrap();
        assert_eq!(shown(&statement), "42s");
        let idle = conn
            .query_one("SHOW idle_in_transaction_session_timeout", &[])
            .await
            .unwrap();
        assert_eq!(shown(&idle), "7s");
    }

    #[tokio::test]
    async fn a_silent_server_or_a_black_holed_address_fails_the_connect_within_the_connect_timeout() {
        // Takes TCP connections and never says a word: the start-up hangs.
        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = silent.accept().await {
                held.push(socket);
            }
        });
        let settings = DatabaseSettings {
            connect_timeout_secs: 1,
            ..DatabaseSettings::new(format!("postgres://clarion@{addr}/clarion"))
        };
        let manager = Manager::new(&settings, &trust(), "clarion-db-test").unwrap();
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(30), bb8::ManageConnection::connect(&manager))
            .await
            .expect("the connect gave up by itself");
        assert!(
            matches!(answer, Err(ConnectError::Timeout(_))),
            "{:?}",
            answer.err()
        );
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        // An address nothing answers from (TEST-NET-1, never routed): the
        // SYN goes unanswered, or the route is refused at once.
        let settings_unrouted = DatabaseSettings {
            connect_timeout_secs: 1,
            ..DatabaseSettings::new("postgres://clarion@192.0.2.1:5432/clarion")
        };
        let unrouted = Manager::new(&settings_unrouted, &trust(), "clarion-db-test").unwrap();
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(30), bb8::ManageConnection::connect(&unrouted))
            .await
            .expect("the connect to a black-holed address gave up by itself");
        assert!(answer.is_err());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        // Through the pool, a caller gets an error, not a hang.
        let pool = pool(&settings, &trust(), "clarion-db-test").unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(30), ping(&pool))
            .await
            .expect("the pool gave up by itself");
        assert!(answer.is_err());
    }
}
