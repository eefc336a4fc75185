//! Statements prepared once per connection and reused ([`StatementCache`]),
//! and a transaction that runs its statements through them ([`Prepared`]):
//! a group commit worker keeps both from batch to batch, so a batch's statement
//! then costs one round trip and no parsing (PostgreSQL may keep its plan
//! too), where a statement sent as text is prepared, run and closed each
//! time.
//!
//! Statements are sent in the order they are asked for, even when one of
//! them must be prepared first: a writer may send several at once
//! (pipelined, `try_join!`) and rely on PostgreSQL running them in that
//! order.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::Mutex;
use std::task::Poll;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Error, Row, Statement, Transaction};

use super::sql::Sql;

/// Most statements kept per connection: the writers send a few fixed
/// texts, so the bound is never reached; if it were, the cache starts
/// over rather than grow.
const MOST_STATEMENTS: usize = 64;

/// Prepared statements of one connection, by SQL text.
#[derive(Default)]
pub struct StatementCache {
    by_sql: Mutex<HashMap<String, Statement>>,
}

impl StatementCache {
    fn get(&self, sql: &str) -> Option<Statement> {
        self.by_sql.lock().ok()?.get(sql).cloned()
    }

    fn keep(&self, sql: &str, statement: &Statement) {
        if let Ok(mut by_sql) = self.by_sql.lock() {
            if by_sql.len() >= MOST_STATEMENTS {
                by_sql.clear();
            }
            by_sql.insert(sql.to_owned(), statement.clone());
        }
    }
}

/// A transaction with its connection's statements: what a group commit's
/// batch writes through.
pub struct Prepared<'a> {
    tx: &'a Transaction<'a>,
    statements: &'a StatementCache,
    /// Taken in turn (first come, first served) from a statement's ask
    /// until it is sent: one being prepared holds back those asked after.
    sending: tokio::sync::Mutex<()>,
}

impl<'a> Prepared<'a> {
    pub fn new(tx: &'a Transaction<'a>, statements: &'a StatementCache) -> Self {
        Self {
            tx,
            statements,
            sending: tokio::sync::Mutex::new(()),
        }
    }

    /// `sql` prepared on this connection (prepared now if it was not).
    async fn statement(&self, sql: &str) -> Result<Statement, Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement);
        }
        let statement = self.tx.prepare(sql).await?;
        self.statements.keep(sql, &statement);
        Ok(statement)
    }
}

impl Sql for Prepared<'_> {
    async fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, Error> {
        let turn = self.sending.lock().await;
        let statement = self.statement(sql).await?;
        // tokio-postgres sends a request when its future is first
        // polled: once polled, the next statement may go.
        let mut query = pin!(self.tx.query(&statement, params));
        if let Poll::Ready(done) = futures::poll!(query.as_mut()) {
            return done;
        }
        drop(turn);
        query.await
    }

    async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, Error> {
        let turn = self.sending.lock().await;
        let statement = self.statement(sql).await?;
        let mut execute = pin!(self.tx.execute(&statement, params));
        if let Poll::Ready(done) = futures::poll!(execute.as_mut()) {
            return done;
        }
        drop(turn);
        execute.await
    }
}
