//! Who is calling: a key's [`Scope`]s, the lanes, topics and apps it may
//! use and its send allowance, checked per request; a refusal is an
//! [`AuthError`] (mapped to 403 or 429 in `crate::error`).

use std::sync::Arc;
use std::time::Duration;

use super::rate::SendLimit;
use super::topics::TopicRules;
use crate::metrics;
use crate::store::audit::Author;
use crate::store::lanes::Lane;

/// Why a caller may not do what it asked.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("this API key lacks the `{}` scope", .0.as_str())]
    Forbidden(Scope),
    /// The key's `lanes` leave this lane out.
    #[error("this API key may not send in the {lane}; it may send in: {allowed}")]
    LaneNotAllowed { lane: String, allowed: String },
    /// The key's `topics` leave this topic out.
    #[error("this API key may not send to topic `{topic}`; its `topics` rule allows: {allowed}")]
    TopicNotAllowed { topic: String, allowed: String },
    /// The key's `apps` leave this app out.
    #[error("this API key may not use app `{app}`; its `apps` rule allows: {allowed}")]
    AppNotAllowed { app: String, allowed: String },
    /// The key's send allowance (`sends_per_minute`) is used up.
    #[error("this API key may send {per_minute} notifications a minute; retry in {retry_after_secs} s")]
    RateLimited { per_minute: u32, retry_after_secs: u64 },
}

/// What a key may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Register and unregister devices (the apps).
    Register,
    /// Send, follow and cancel notifications; read topic sizes (the newsroom).
    Send,
    /// Everything, including operational endpoints.
    Admin,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Register => "register",
            Scope::Send => "send",
            Scope::Admin => "admin",
        }
    }

    pub(super) fn bit(self) -> u8 {
        match self {
            Scope::Register => 1,
            Scope::Send => 2,
            Scope::Admin => 4,
        }
    }

    pub(super) fn parse(name: &str) -> Result<Self, String> {
        match name {
            "register" => Ok(Scope::Register),
            "send" => Ok(Scope::Send),
            "admin" => Ok(Scope::Admin),
            other => Err(format!(
                "unknown scope {other:?}: expected register, send or admin"
            )),
        }
    }
}

/// An authenticated caller; extract it in a handler (`crate::api::authenticate`),
/// then `require` a scope.
#[derive(Clone)]
pub struct Caller {
    /// Fingerprint of the caller's key (12 hex characters).
    pub key_id: String,
    /// The key's name in the keys file (its fingerprint otherwise).
    pub key_name: String,
    pub(super) scopes: u8,
    pub(super) send_limit: Option<Arc<SendLimit>>,
    pub(super) lanes: LaneSet,
    pub(super) topics: TopicRules,
    /// The apps it may use; `None`: every app.
    pub(super) apps: Option<Arc<Vec<String>>>,
}

/// The lanes a key may send in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneSet(u8);

impl LaneSet {
    pub const NONE: LaneSet = LaneSet(0);
    pub const ALL: LaneSet = LaneSet(0b111);

    fn bit(lane: Lane) -> u8 {
        match lane {
            Lane::Urgent => 1,
            Lane::Standard => 2,
            Lane::Bulk => 4,
        }
    }

    pub fn with(self, lane: Lane) -> Self {
        LaneSet(self.0 | Self::bit(lane))
    }

    pub fn contains(self, lane: Lane) -> bool {
        self.0 & Self::bit(lane) != 0
    }

    /// The lanes, comma-separated, in the relay's order.
    pub fn names(self) -> String {
        Lane::ALL
            .iter()
            .filter(|lane| self.contains(**lane))
            .map(|lane| lane.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("key_id", &self.key_id)
            .field("key_name", &self.key_name)
            .field("scopes", &self.scopes)
            .finish()
    }
}

impl Caller {
    /// Ok when the key holds `scope` (or `admin`), 403 otherwise.
    pub fn require(&self, scope: Scope) -> Result<(), AuthError> {
        if self.scopes & (scope.bit() | Scope::Admin.bit()) != 0 {
            Ok(())
        } else {
            Err(AuthError::Forbidden(scope))
        }
    }

    /// Ok when the key may send in `lane` (keys file `lanes`), 403 naming
    /// the lanes it may use otherwise.
    pub fn check_lane(&self, lane: Lane) -> Result<(), AuthError> {
        if self.lanes.contains(lane) {
            Ok(())
        } else {
            let default = if lane == Lane::default() {
                " (the default when `lane` is left out)"
            } else {
                ""
            };
            Err(AuthError::LaneNotAllowed {
                lane: format!("`{lane}` lane{default}"),
                allowed: self.lanes.names(),
            })
        }
    }

    /// Ok when the key may send to every one of `topics` (keys file
    /// `topics`), 403 naming the first it may not and the rule otherwise.
    pub fn check_topics(&self, topics: &[String]) -> Result<(), AuthError> {
        match self.topics.first_refused(topics) {
            None => Ok(()),
            Some(topic) => Err(AuthError::TopicNotAllowed {
                topic: topic.to_owned(),
                allowed: self.topics.describe().to_owned(),
            }),
        }
    }

    /// Ok when the key may use `app` (keys file `apps`), 403 naming the
    /// app and the rule otherwise.
    pub fn check_app(&self, app: &str) -> Result<(), AuthError> {
        match &self.apps {
            Some(apps) if !apps.iter().any(|allowed| allowed == app) => Err(AuthError::AppNotAllowed {
                app: app.to_owned(),
                allowed: apps.join(", "),
            }),
            _ => Ok(()),
        }
    }

    /// Whether the key holds the `admin` scope (its every use is audited).
    pub fn is_admin(&self) -> bool {
        self.scopes & Scope::Admin.bit() != 0
    }

    /// Takes one send from the key's allowance: 429 with the seconds to
    /// wait when it is used up; always Ok for a key without a limit.
    pub fn check_send_rate(&self) -> Result<(), AuthError> {
        let Some(limit) = &self.send_limit else {
            return Ok(());
        };
        limit.check().map_err(|wait| {
            metrics::SENDS_RATE_LIMITED.get().increment(1);
            AuthError::RateLimited {
                per_minute: limit.per_minute_rate(),
                retry_after_secs: whole_seconds(wait),
            }
        })
    }
}

impl Author for Caller {
    fn key_id(&self) -> &str {
        &self.key_id
    }

    fn key_name(&self) -> &str {
        &self.key_name
    }
}

/// A wait in whole seconds, rounded up, at least 1 (for `Retry-After`).
fn whole_seconds(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_whole_seconds_rounded_up() {
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::ZERO), 1);
        assert_eq!(whole_seconds(Duration::from_millis(29_001)), 30);
        assert_eq!(whole_seconds(Duration::from_secs(30)), 30);
    }
}
