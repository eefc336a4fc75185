//! SQL access to PostgreSQL, one module per table (or group of tables that
//! move together). The store decides nothing: what the rows mean for a
//! notification's progress lives in [`crate::progress`].

pub mod audit;
pub mod console_sessions;
pub mod delivery;
pub mod held;
pub mod hygiene;
pub mod lanes;
pub mod live_activities;
pub mod notification_list;
pub mod notifications;
pub mod outbox;
pub mod prepared;
pub mod registrations;
pub mod scheduled;
pub mod sql;
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
    /// Whether trying again may succeed. Only an error the message itself
    /// causes fails the same way every time — a value PostgreSQL refuses
    /// (class 22), a constraint it breaks (23), a statement it makes touch
    /// one row twice (21), data that cannot be read back — and such a
    /// message is given up at once. Everything else (the database out of
    /// reach, a lost race, a timeout, and also a missing table or column
    /// while replicas of two versions run) is retried: failing every
    /// notification in flight for a passing cause would be worse.
    pub fn is_transient(&self) -> bool {
        let err = match self {
            StoreError::Db(DbError::Query(err)) => err,
            StoreError::Db(_) => return true,
            StoreError::Corrupt(_) | StoreError::UnknownToken | StoreError::TooManyTopics { .. } => {
                return false;
            }
        };
        match err.code() {
            Some(code) => !["21", "22", "23"]
                .iter()
                .any(|class| code.code().starts_with(class)),
            // No SQL state: the connection broke, or a value could not be
            // encoded (which fails every time).
            None => {
                err.is_closed()
                    || std::error::Error::source(err).is_some_and(|source| source.is::<std::io::Error>())
            }
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
