//! SQL access to PostgreSQL, one module per table (or group of tables that
//! move together). The store decides nothing: what the rows mean for a
//! notification's progress lives in [`crate::progress`].

pub mod delivery;
pub mod notifications;
pub mod outbox;
pub mod registrations;
pub mod topics;

use clarion_runtime::db::DbError;

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("token is not registered")]
    UnknownToken,
    #[error("the device already follows {limit} topics, the most allowed")]
    TooManyTopics { limit: u32 },
    #[error("unexpected value in the database: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// Whether trying again may succeed: the database was out of reach, the
    /// connection broke, or the transaction lost a race. Anything else (a
    /// statement the data makes fail) fails the same way every time, so the
    /// message carrying it is given up at once rather than retried.
    pub fn is_transient(&self) -> bool {
        let err = match self {
            StoreError::Db(DbError::Pool(_)) => return true,
            StoreError::Db(DbError::Query(err)) => err,
            _ => return false,
        };
        if err.is_closed() {
            return true;
        }
        match err.code() {
            // No SQL state: transient only when the connection's I/O failed
            // (a value that cannot be encoded fails every time).
            None => std::error::Error::source(err).is_some_and(|source| source.is::<std::io::Error>()),
            // 08 connection exception, 40 transaction rollback (serialization
            // failure, deadlock), 53 insufficient resources, 57 operator
            // intervention (shutdown, statement timeout), 58 system error.
            Some(code) => ["08", "40", "53", "57", "58"]
                .iter()
                .any(|class| code.code().starts_with(class)),
        }
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(err: tokio_postgres::Error) -> Self {
        StoreError::Db(DbError::Query(err))
    }
}

/// What counting one report into its notification's row found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Counted now.
    Now,
    /// Already counted (a redelivered report); nothing changed.
    Duplicate,
    /// No such notification (deleted, or from another installation).
    UnknownNotification,
}
