//! SQL access to PostgreSQL, one module per table (or group of tables that
//! move together). The store decides nothing: what the rows mean for a
//! notification's progress lives in [`crate::progress`].

pub mod delivery;
pub mod notifications;
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
