//! The audit log (`audit_log`): who did what, when, to what. Written in
//! the transaction of the action it records where there is one.

use chrono::{DateTime, Utc};
use tokio_postgres::GenericClient;

use super::StoreError;

/// Who did an audited action: the key's fingerprint and its name (the
/// API's `Caller` is one).
pub trait Author {
    fn key_id(&self) -> &str;
    fn key_name(&self) -> &str;
}

/// The actions recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A send, a scheduled one included (its detail says for when).
    Send,
    Cancel,
    /// A scheduled notification replaced before it fired.
    Replace,
    HeldRelease,
    HeldDiscard,
    /// Any request made with a key of scope `admin`.
    AdminRequest,
    /// A console sign-in or sign-out.
    ConsoleSession,
}

impl Action {
    pub const ALL: [Action; 7] = [
        Action::Send,
        Action::Cancel,
        Action::Replace,
        Action::HeldRelease,
        Action::HeldDiscard,
        Action::AdminRequest,
        Action::ConsoleSession,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Send => "send",
            Action::Cancel => "cancel",
            Action::Replace => "replace",
            Action::HeldRelease => "held.release",
            Action::HeldDiscard => "held.discard",
            Action::AdminRequest => "admin.request",
            Action::ConsoleSession => "console.session",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|action| action.as_str() == name)
    }
}

/// Records that `caller` did `action` to `target`.
pub async fn record(
    client: &impl GenericClient,
    caller: &impl Author,
    action: Action,
    target: &str,
    detail: &str,
) -> Result<(), StoreError> {
    client
        .execute(
            "INSERT INTO audit_log (key_id, key_name, action, target, detail) VALUES ($1, $2, $3, $4, $5)",
            &[
                &caller.key_id(),
                &caller.key_name(),
                &action.as_str(),
                &target,
                &detail,
            ],
        )
        .await?;
    Ok(())
}

/// One audit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub key_id: String,
    pub key_name: String,
    pub action: String,
    pub target: String,
    pub detail: String,
}

/// Up to `limit` records older than `before` (an id; all when `None`),
/// newest first, of `action` only when given.
pub async fn page(
    client: &impl GenericClient,
    limit: u32,
    before: Option<i64>,
    action: Option<Action>,
) -> Result<Vec<AuditEntry>, StoreError> {
    let rows = client
        .query(
            "SELECT id, at, key_id, key_name, action, target, detail FROM audit_log
              WHERE ($1::bigint IS NULL OR id < $1) AND ($2::text IS NULL OR action = $2)
              ORDER BY id DESC LIMIT $3",
            &[&before, &action.map(Action::as_str), &i64::from(limit)],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| AuditEntry {
            id: row.get(0),
            at: row.get(1),
            key_id: row.get(2),
            key_name: row.get(3),
            action: row.get(4),
            target: row.get(5),
            detail: row.get(6),
        })
        .collect())
}
