//! [`Sql`]: what the set-based writers need of a connection — run a
//! statement given as text — so one writer serves a plain client or
//! transaction (each statement prepared anew) and a group commit's batch
//! (each statement prepared once per connection and reused:
//! [`super::prepared`]).

use std::future::Future;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Error, GenericClient, Row};

/// Runs statements given as SQL text.
pub trait Sql: Sync {
    /// Like [`GenericClient::query`].
    fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>, Error>> + Send;

    /// Like [`GenericClient::execute`].
    fn execute(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64, Error>> + Send;
}

impl<C: GenericClient + Sync> Sql for C {
    async fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, Error> {
        GenericClient::query(self, sql, params).await
    }

    async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, Error> {
        GenericClient::execute(self, sql, params).await
    }
}
