//! API keys and scopes: `Authorization: Bearer <key>` on every endpoint but
//! the open ones, keys from `CLARION_API_KEYS` (`key=scope+scope,...`).
//!
//! Keys are kept only as SHA-256 digests and compared in constant time; a
//! caller is identified by a short fingerprint of its key, which is what logs
//! and the `notifications.api_key_id` column hold — never the key.

use std::fmt;
use std::future::{Ready, ready};
use std::sync::Arc;

use actix_web::{FromRequest, HttpRequest, dev::Payload, http::header, web};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

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

#[derive(Clone)]
struct KeyEntry {
    digest: [u8; 32],
    id: String,
    scopes: u8,
}

/// The configured keys. `Debug` shows fingerprints only.
#[derive(Clone)]
pub struct ApiKeys {
    entries: Arc<Vec<KeyEntry>>,
}

impl fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|entry| &entry.id))
            .finish()
    }
}

impl ApiKeys {
    /// Parses `key=scope+scope,key2=scope`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut entries: Vec<KeyEntry> = Vec::new();
        for item in spec.split(',').map(str::trim).filter(|item| !item.is_empty()) {
            let (key, scopes) = item
                .split_once('=')
                .ok_or_else(|| format!("API key entry {:?} lacks '=scope'", fingerprint_hint(item)))?;
            if key.is_empty() || key.chars().any(char::is_whitespace) {
                return Err("an API key is empty or holds white space".into());
            }
            let mut bits = 0;
            for scope in scopes.split('+') {
                bits |= Scope::parse(scope.trim())?.bit();
            }
            let digest = digest(key);
            let id = key_id(&digest);
            if entries.iter().any(|entry| entry.digest == digest) {
                return Err(format!("API key {id} is listed twice"));
            }
            entries.push(KeyEntry {
                digest,
                id,
                scopes: bits,
            });
        }
        if entries.is_empty() {
            return Err("no API keys configured".into());
        }
        Ok(Self {
            entries: Arc::new(entries),
        })
    }

    /// The caller holding `key`, if it is one of ours.
    pub fn identify(&self, key: &str) -> Option<Caller> {
        let presented = digest(key);
        let mut found = None;
        // Visit every entry whatever matches, comparing digests in constant time.
        for entry in self.entries.iter() {
            if bool::from(entry.digest.ct_eq(&presented)) {
                found = Some(entry);
            }
        }
        found.map(|entry| Caller {
            key_id: entry.id.clone(),
            scopes: entry.scopes,
        })
    }
}

/// An authenticated caller; extract it in a handler, then `require` a scope.
#[derive(Clone, Debug)]
pub struct Caller {
    /// Fingerprint of the caller's key (12 hex characters).
    pub key_id: String,
    scopes: u8,
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
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Ready<Result<Caller, ApiError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        ready(authenticate(req))
    }
}

fn authenticate(req: &HttpRequest) -> Result<Caller, ApiError> {
    let keys = req
        .app_data::<web::Data<ApiKeys>>()
        .ok_or_else(|| ApiError::Internal("API keys are not configured on this app".into()))?;
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .ok_or(ApiError::Unauthenticated(
            "missing `Authorization: Bearer <key>` header",
        ))?;
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

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

fn key_id(digest: &[u8; 32]) -> String {
    hex::encode(&digest[..6])
}

/// A malformed entry may be a key: show only its fingerprint in errors.
fn fingerprint_hint(item: &str) -> String {
    format!("key {}", key_id(&digest(item)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_get_their_scopes_and_admin_implies_all() {
        let keys = ApiKeys::parse("app-k3y=register, desk-k3y=send+register,ops=admin").unwrap();
        let app = keys.identify("app-k3y").unwrap();
        assert!(app.require(Scope::Register).is_ok());
        assert!(matches!(
            app.require(Scope::Send),
            Err(ApiError::Forbidden(Scope::Send))
        ));
        let desk = keys.identify("desk-k3y").unwrap();
        assert!(desk.require(Scope::Send).is_ok() && desk.require(Scope::Register).is_ok());
        assert!(desk.require(Scope::Admin).is_err());
        let ops = keys.identify("ops").unwrap();
        for scope in [Scope::Register, Scope::Send, Scope::Admin] {
            assert!(ops.require(scope).is_ok());
        }
        assert!(keys.identify("app-k3").is_none());
        assert!(keys.identify("").is_none());
    }

    #[test]
    fn key_ids_are_fingerprints_not_keys() {
        let keys = ApiKeys::parse("s3cret=send").unwrap();
        let caller = keys.identify("s3cret").unwrap();
        assert_eq!(caller.key_id.len(), 12);
        assert!(!format!("{keys:?}").contains("s3cret"));
    }

    #[test]
    fn malformed_specs_are_refused_without_echoing_keys() {
        for spec in ["", "k", "k=", "k=root", "a b=send", "k=send,k=admin"] {
            let err = ApiKeys::parse(spec).unwrap_err();
            assert!(!err.contains("k="), "{spec}: {err}");
        }
        let err = ApiKeys::parse("topsecret").unwrap_err();
        assert!(!err.contains("topsecret"), "{err}");
    }
}
