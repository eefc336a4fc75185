//! API keys and scopes: `Authorization: Bearer <key>` on every endpoint but
//! the open ones. Keys come from `CLARION_API_KEYS` (`key=scope+scope,...`)
//! or from a keys file re-read when it changes (`CLARION_API_KEYS_FILE`,
//! [`file`](mod@file)); one of the two is required unless `--dev` is given.
//!
//! A caller is identified by its key's name and a short fingerprint of the
//! key ([`keys`]), never by the key; a key may carry a send rate ([`rate`]).
//! What a caller may do is checked by [`caller`].
//!
//! A request without an `Authorization` header may instead carry the
//! console's session cookie (`crate::console::session`): it stands for
//! the key the editor signed in with, with that key's scopes as they are
//! now, and every request that changes something must also carry the
//! session's `X-CSRF-Token`. Which of the two a request carries is read by
//! the API's extractor (`crate::api::authenticate`).

pub mod caller;
pub mod file;
pub mod keys;
pub mod rate;
pub mod topics;

use std::sync::Arc;

use arc_swap::ArcSwap;

pub use caller::{AuthError, Caller, LaneSet, Scope};
pub use keys::KeySet;

/// The well-known development key, accepted only with `--dev`.
pub const DEV_API_KEY: &str = "dev-admin-key";

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
}
