//! Helpers for integration tests that talk to the machine's real PostgreSQL
//! and RabbitMQ: a throw-away database per test and a unique AMQP namespace,
//! so tests run in parallel without seeing each other's data. Both also
//! work on other servers reached over TLS (`create_at`, `at`).

use tokio_postgres::NoTls;

use crate::pg_connect::PgTarget;
use crate::settings::{BrokerSettings, DatabaseSettings};
use crate::tls::Trust;

/// URL of a database the tests may connect to in order to create others.
pub const ADMIN_URL_VAR: &str = "CLARION_TEST_DATABASE_URL";
pub const DEFAULT_ADMIN_URL: &str = "postgres://clarion:clarion@127.0.0.1:5432/postgres";
/// URL of the broker the tests use.
pub const AMQP_URL_VAR: &str = "CLARION_TEST_AMQP_URL";
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// A database created for one test and dropped when the value is dropped.
pub struct TestDatabase {
    pub url: String,
    pub name: String,
    admin_url: String,
    /// Set when the server is reached as the URL's `sslmode` says.
    trust: Option<Trust>,
}

impl TestDatabase {
    /// Creates an empty database with a unique name. Panics with a hint when
    /// PostgreSQL cannot be reached (run `./scripts/test` once to set it up).
    pub async fn create() -> Self {
        let admin_url = std::env::var(ADMIN_URL_VAR).unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_owned());
        Self::create_on(admin_url, None).await
    }

    /// Creates an empty database on the server `admin_url` names, reached
    /// as its `sslmode` says, trusting what `trust` trusts.
    pub async fn create_at(admin_url: &str, trust: &Trust) -> Self {
        Self::create_on(admin_url.to_owned(), Some(trust.clone())).await
    }

    async fn create_on(admin_url: String, trust: Option<Trust>) -> Self {
        let name = format!("clarion_test_{}", uuid::Uuid::new_v4().simple());
        let admin = admin_client(&admin_url, trust.as_ref()).await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|err| panic!("cannot create test database {name}: {err}"));
        let url = with_database(&admin_url, &name);
        Self {
            url,
            name,
            admin_url,
            trust,
        }
    }

    /// A session on the test database.
    pub async fn client(&self) -> tokio_postgres::Client {
        connect(&self.url, self.trust.as_ref())
            .await
            .unwrap_or_else(|err| panic!("cannot connect to {}: {err}", self.name))
    }

    pub fn settings(&self, pool_size: u32) -> DatabaseSettings {
        DatabaseSettings {
            pool_size,
            ..DatabaseSettings::new(self.url.clone())
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        let trust = self.trust.clone();
        run_outside(async move {
            if let Ok(client) = connect(&admin_url, trust.as_ref()).await {
                let _ = client
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await;
            }
        });
    }
}

/// An AMQP namespace no other test uses; its queues and exchanges are
/// deleted when the value is dropped (even when the test panicked).
pub struct TestNamespace {
    pub settings: BrokerSettings,
    trust: Trust,
}

impl TestNamespace {
    pub fn new() -> Self {
        let url = std::env::var(AMQP_URL_VAR).unwrap_or_else(|_| DEFAULT_AMQP_URL.to_owned());
        let trust = Trust::load(&crate::TlsSettings::default())
            .unwrap_or_else(|err| panic!("cannot load the system trust store: {err}"));
        Self::at(&url, &trust)
    }

    /// A namespace on the broker at `url`, trusting what `trust` trusts.
    pub fn at(url: &str, trust: &Trust) -> Self {
        Self {
            settings: BrokerSettings {
                url: url.to_owned(),
                namespace: format!("test-{}", uuid::Uuid::new_v4().simple()),
            },
            trust: trust.clone(),
        }
    }
}

impl Default for TestNamespace {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let settings = self.settings.clone();
        let trust = self.trust.clone();
        run_outside(async move { delete_namespace(&settings, &trust).await });
    }
}

/// Runs a clean-up future to completion on a private runtime in its own
/// thread: `Drop` may run inside or outside a runtime.
fn run_outside(cleanup: impl std::future::Future<Output = ()> + Send + 'static) {
    let worker = std::thread::spawn(move || {
        if let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
            runtime.block_on(cleanup);
        }
    });
    let _ = worker.join();
}

async fn admin_client(url: &str, trust: Option<&Trust>) -> tokio_postgres::Client {
    connect(url, trust).await.unwrap_or_else(|err| {
        panic!(
            "cannot reach PostgreSQL at {ADMIN_URL_VAR}={url}: {err}\n\
             run ./scripts/test once (it creates the `clarion` role) or point {ADMIN_URL_VAR} at a role that may CREATE DATABASE"
        )
    })
}

/// A session on `url`: plain, or as its `sslmode` says when `trust` is given.
async fn connect(url: &str, trust: Option<&Trust>) -> Result<tokio_postgres::Client, String> {
    match trust {
        Some(trust) => {
            let target = PgTarget::new(url, trust).map_err(|err| err.to_string())?;
            let (client, _driver) = target.connect().await.map_err(|err| err.to_string())?;
            Ok(client)
        }
        None => {
            let (client, conn) = tokio_postgres::connect(url, NoTls)
                .await
                .map_err(|err| err.to_string())?;
            tokio::spawn(conn);
            Ok(client)
        }
    }
}

/// `url` with its database name replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_end = base.find("://").map_or(0, |i| i + 3);
    let prefix = match base[authority_end..].find('/') {
        Some(slash) => &base[..authority_end + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{prefix}/{name}?{query}"),
        None => format!("{prefix}/{name}"),
    }
}

/// Deletes every queue and exchange of a namespace.
async fn delete_namespace(settings: &BrokerSettings, trust: &Trust) {
    let names = clarion_proto::Names::new(settings.namespace.clone());
    let connection =
        crate::amqp::connect::open(&settings.url, lapin::ConnectionProperties::default(), trust).await;
    if let Ok(connection) = connection {
        if let Ok(channel) = connection.create_channel().await {
            let _ = crate::amqp::topology::delete(&channel, &names).await;
        }
        let _ = connection.close(200, "test done".into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_name_is_replaced() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/postgres", "x"),
            "postgres://u:p@h:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@h/db?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://u@h", "x"), "postgres://u@h/x");
    }
}
