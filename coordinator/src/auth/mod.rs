//! API keys and scopes: `Authorization: Bearer <key>` on every endpoint but
//! the open ones. Keys come from `CLARION_API_KEYS` (`key=scope+scope,...`)
//! or from a keys file re-read when it changes (`CLARION_API_KEYS_FILE`,
//! [`file`]); one of the two is required unless `--dev` is given.
//!
//! A caller is identified by its key's name and a short fingerprint of the
//! key ([`keys`]), never by the key; a key may carry a send rate ([`rate`]).
//!
//! A request without an `Authorization` header may instead carry the
//! console's session cookie ([`crate::console::session`]): it stands for
//! the key the editor signed in with, with that key's scopes as they are
//! now, and every request that changes something must also carry the
//! session's `X-CSRF-Token`.

pub mod file;
pub mod keys;
pub mod rate;
pub mod topics;

use std::sync::Arc;
use std::time::Duration;

use actix_web::{FromRequest, HttpMessage, HttpRequest, dev::Payload, http::header, web};
use arc_swap::ArcSwap;
use futures::future::LocalBoxFuture;

use crate::error::ApiError;
use crate::store::lanes::Lane;
pub use keys::KeySet;
use rate::SendLimit;
use topics::TopicRules;

/// The well-known development key, accepted only with `--dev`.
pub const DEV_API_KEY: &str = "dev-admin-key";

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

    fn bit(self) -> u8 {
        match self {
            Scope::Register => 1,
            Scope::Send => 2,
            Scope::Admin => 4,
        }
    }

    fn parse(name: &str) -> Result<Self, String> {
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

/// The keys in force: swapped whole when the keys file changes, read
/// without a lock by every request.
#[derive(Clone, Debug)]
pub struct ApiKeys {
    current: Arc<ArcSwap<KeySet>>,
}

impl ApiKeys {
    pub fn new(keys: KeySet) -> Self {
        Self {
            current: Arc::new(ArcSwap::from_pointee(keys)),
        }
    }

    /// The keys in force now.
    pub fn current(&self) -> Arc<KeySet> {
        self.current.load_full()
    }

    /// Puts `keys` in force for every request from now on.
    pub fn replace(&self, keys: KeySet) {
        self.current.store(Arc::new(keys));
    }

    /// The caller holding `key`, if it is one of the keys in force.
    pub fn identify(&self, key: &str) -> Option<Caller> {
        self.current.load().identify(key)
    }

    /// The caller holding the key whose SHA-256 is `digest`, if that key is
    /// still in force (a console session's key).
    pub fn identify_digest(&self, digest: &[u8; 32]) -> Option<Caller> {
        self.current.load().identify_digest(digest)
    }
}

/// An authenticated caller; extract it in a handler, then `require` a scope.
#[derive(Clone)]
pub struct Caller {
    /// Fingerprint of the caller's key (12 hex characters).
    pub key_id: String,
    /// The key's name in the keys file (its fingerprint otherwise).
    pub key_name: String,
    scopes: u8,
    send_limit: Option<Arc<SendLimit>>,
    lanes: LaneSet,
    topics: TopicRules,
    /// The apps it may use; `None`: every app.
    apps: Option<Arc<Vec<String>>>,
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
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.scopes & (scope.bit() | Scope::Admin.bit()) != 0 {
            Ok(())
        } else {
            Err(ApiError::Forbidden(scope))
        }
    }

    /// Ok when the key may send in `lane` (keys file `lanes`), 403 naming
    /// the lanes it may use otherwise.
    pub fn check_lane(&self, lane: Lane) -> Result<(), ApiError> {
        if self.lanes.contains(lane) {
            Ok(())
        } else {
            let default = if lane == Lane::default() {
                " (the default when `lane` is left out)"
            } else {
                ""
            };
            Err(ApiError::LaneNotAllowed {
                lane: format!("`{lane}` lane{default}"),
                allowed: self.lanes.names(),
            })
        }
    }

    /// Ok when the key may send to every one of `topics` (keys file
    /// `topics`), 403 naming the first it may not and the rule otherwise.
    pub fn check_topics(&self, topics: &[String]) -> Result<(), ApiError> {
        match self.topics.first_refused(topics) {
            None => Ok(()),
            Some(topic) => Err(ApiError::TopicNotAllowed {
                topic: topic.to_owned(),
                allowed: self.topics.describe().to_owned(),
            }),
        }
    }

    /// Ok when the key may use `app` (keys file `apps`), 403 naming the
    /// app and the rule otherwise.
    pub fn check_app(&self, app: &str) -> Result<(), ApiError> {
        match &self.apps {
            Some(apps) if !apps.iter().any(|allowed| allowed == app) => Err(ApiError::AppNotAllowed {
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
    pub fn check_send_rate(&self) -> Result<(), ApiError> {
        let Some(limit) = &self.send_limit else {
            return Ok(());
        };
        limit.check().map_err(|wait| {
            metrics::counter!("clarion_api_sends_rate_limited_total").increment(1);
            ApiError::RateLimited {
                per_minute: limit.per_minute_rate(),
                retry_after_secs: whole_seconds(wait),
            }
        })
    }
}

/// A wait in whole seconds, rounded up, at least 1 (for `Retry-After`).
fn whole_seconds(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Caller, ApiError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let caller = authenticate(&req).await;
            if let Ok(caller) = &caller {
                // For the audit of admin keys' use (see `api::audit`).
                req.extensions_mut().insert(caller.clone());
            }
            caller
        })
    }
}

async fn authenticate(req: &HttpRequest) -> Result<Caller, ApiError> {
    let keys = req
        .app_data::<web::Data<ApiKeys>>()
        .ok_or_else(|| ApiError::Internal("API keys are not configured on this app".into()))?;
    let Some(header) = req.headers().get(header::AUTHORIZATION) else {
        if let Some(cookie) = req.cookie(crate::console::session::COOKIE) {
            return crate::console::session::caller(req, keys, cookie.value()).await;
        }
        return Err(ApiError::Unauthenticated(
            "missing `Authorization: Bearer <key>` header",
        ));
    };
    let key = header
        .to_str()
        .ok()
        .and_then(|value| {
            value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "))
        })
        .map(str::trim)
        .ok_or(ApiError::Unauthenticated(
            "the Authorization header is not `Bearer <key>`",
        ))?;
    keys.identify(key)
        .ok_or(ApiError::Unauthenticated("unknown API key"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaced_keys_are_in_force_at_once() {
        let keys = ApiKeys::new(KeySet::parse("old=send").unwrap());
        assert!(keys.identify("old").is_some());
        keys.replace(KeySet::parse("new=send").unwrap());
        assert!(keys.identify("old").is_none());
        assert!(keys.identify("new").is_some());
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up() {
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::ZERO), 1);
        assert_eq!(whole_seconds(Duration::from_millis(29_001)), 30);
        assert_eq!(whole_seconds(Duration::from_secs(30)), 30);
    }
}
