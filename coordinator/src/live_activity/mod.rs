//! Live Activities (issue 38), the coordinator's side: it never calls
//! Apple. Each request commits its rows and its channel commands (the
//! outbox, `live_activity_commands`) before the API answers; the
//! [`relay::CommandRelay`] publishes them to `deliver.ios.channels` for
//! the iOS dispatcher, whose reports [`report::record`] records once each;
//! the report that gives an activity's last channel its id accepts its
//! start push as an ordinary notification. See
//! docs/src/api/live-activities.md#how-it-flows.
//!
//! - [`create`]: the activity, a channel per APNs environment, the limit.
//! - [`update`]: updates and ends (one broadcast per channel), deletes.
//! - [`relay`]: publishing the commands, and the sweep of ended activities.
//! - [`report`]: the dispatcher's outcomes, and the start push.

pub mod create;
pub mod relay;
pub mod report;
pub mod update;

use clarion_proto::live_activity::LiveActivityError;
use serde_json::Value;
use uuid::Uuid;

use crate::store::StoreError;

/// Why an activity request was refused.
#[derive(Debug, thiserror::Error)]
pub enum ActivityError {
    /// A rule broken; the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// Apple's limit of channels per app and environment is reached.
    #[error(
        "app `{app}` has {limit} live broadcast channels in the APNs {environment} environment, Apple's limit: end or delete activities (their channels are deleted a day after the end) and try again"
    )]
    Full {
        app: String,
        environment: String,
        limit: u32,
    },
    #[error("no live activity {0}")]
    NotFound(Uuid),
    /// An update of an ended activity.
    #[error("live activity {0} has ended; it takes no more updates")]
    Ended(Uuid),
    /// An update of a deleted activity (ended or not).
    #[error("live activity {0} was deleted; it takes no more updates")]
    Deleted(Uuid),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<LiveActivityError> for ActivityError {
    fn from(err: LiveActivityError) -> Self {
        let message = err.to_string();
        // Every message but the size's starts with its field already.
        if message.starts_with(err.field()) {
            ActivityError::Invalid(message)
        } else {
            ActivityError::Invalid(format!("{}: {message}", err.field()))
        }
    }
}

impl From<tokio_postgres::Error> for ActivityError {
    fn from(err: tokio_postgres::Error) -> Self {
        ActivityError::Store(err.into())
    }
}

impl From<clarion_runtime::db::DbError> for ActivityError {
    fn from(err: clarion_runtime::db::DbError) -> Self {
        ActivityError::Store(err.into())
    }
}

/// Now, in Unix seconds: APNs `timestamp`s.
pub fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Refuses a NUL character anywhere in `value` (its strings and keys):
/// PostgreSQL stores neither `\u0000` in jsonb nor NUL in text, so it would
/// fail the request's transaction instead of naming the field.
pub fn no_nul(field: &str, value: &Value) -> Result<(), ActivityError> {
    fn has_nul(value: &Value) -> bool {
        match value {
            Value::String(text) => text.contains('\0'),
            Value::Array(items) => items.iter().any(has_nul),
            Value::Object(map) => map.iter().any(|(key, item)| key.contains('\0') || has_nul(item)),
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }
    if has_nul(value) {
        return Err(ActivityError::Invalid(format!(
            "{field} contains a NUL character (U+0000), which cannot be stored"
        )));
    }
    Ok(())
}
