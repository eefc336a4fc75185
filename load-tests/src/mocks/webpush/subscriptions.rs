//! The subscriptions a mock push service knows: made for tests as a
//! browser makes them (a P-256 key pair and a 16-byte auth secret, bound to
//! the application server's VAPID key), looked up by the endpoint's path.
//!
//! A subscription's id (the last segment of its endpoint's path) is the
//! registration token the tests register it under, so the mock's counts
//! and faults are keyed as for APNs and FCM tokens.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use anyhow::{Context, Result, bail};
use aws_lc_rs::agreement::{ECDH_P256, PrivateKey};
use clarion_proto::web_push::base64url;
use rand::RngCore;
use serde_json::{Value, json};

use super::decrypt::UserAgentKeys;
use super::seeded::SeededKeys;

/// Where the mock serves subscriptions: `POST /push/<id>`.
pub const PUSH_PATH: &str = "/push/";
/// Most subscriptions a mock knows (the largest test audience, with room):
/// each holds a key, so the registry cannot grow without bound.
pub const MAX_SUBSCRIPTIONS: usize = 1_000_000;

/// A subscription as the mock holds it.
pub struct Subscription {
    pub keys: UserAgentKeys,
    /// The `applicationServerKey` it was made for: pushes signed with
    /// another VAPID key are refused 403, as push services do.
    pub server_key: Vec<u8>,
}

/// What a test registers with Clarion: the browser's `PushSubscription`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestSubscription {
    /// The id in the endpoint's path, and the registration token.
    pub token: String,
    pub endpoint: String,
    /// `keys.p256dh` and `keys.auth`, base64url.
    pub p256dh: String,
    pub auth: String,
}

impl TestSubscription {
    /// The `PushSubscription` JSON (`toJSON()` in a browser).
    pub fn json(&self) -> Value {
        json!({"endpoint": self.endpoint, "expirationTime": null,
               "keys": {"p256dh": self.p256dh, "auth": self.auth}})
    }

    /// The body of `PUT /api/v1/registrations/{token}` for it.
    pub fn registration(&self, topics: &[&str]) -> Value {
        json!({"platform": "web", "subscription": self.json(), "topics": topics})
    }
}

/// The subscriptions of one mock, by id.
#[derive(Default)]
pub struct Subscriptions {
    by_id: RwLock<HashMap<String, Arc<Subscription>>>,
    /// Set when seeded subscriptions are accepted: the seeded keys and the
    /// application server key they were made for (the mock's own).
    seeded: OnceLock<(&'static SeededKeys, Vec<u8>)>,
}

/// A subscription the mock knows, made one by one or seeded.
pub enum Known<'a> {
    Made(Arc<Subscription>),
    Seeded {
        keys: &'a UserAgentKeys,
        server_key: &'a [u8],
    },
}

impl Known<'_> {
    pub fn keys(&self) -> &UserAgentKeys {
        match self {
            Known::Made(subscription) => &subscription.keys,
            Known::Seeded { keys, .. } => keys,
        }
    }

    pub fn server_key(&self) -> &[u8] {
        match self {
            Known::Made(subscription) => &subscription.server_key,
            Known::Seeded { server_key, .. } => server_key,
        }
    }
}

impl Subscriptions {
    /// Makes a subscription `token` on the push service at `base` (its
    /// origin) for the application server key `server_key`.
    pub fn create(&self, base: &str, token: &str, server_key: &[u8]) -> Result<TestSubscription> {
        let private = PrivateKey::generate(&ECDH_P256).context("generating a subscription key")?;
        let public = private
            .compute_public_key()
            .context("the subscription's public key")?
            .as_ref()
            .to_vec();
        let mut auth = [0u8; 16];
        rand::rng().fill_bytes(&mut auth);
        let subscription = TestSubscription {
            token: token.to_owned(),
            endpoint: format!("{base}{PUSH_PATH}{token}"),
            p256dh: base64url(&public),
            auth: base64url(&auth),
        };
        let mut by_id = self.by_id.write().unwrap_or_else(|p| p.into_inner());
        if by_id.len() >= MAX_SUBSCRIPTIONS && !by_id.contains_key(token) {
            bail!("the mock holds {MAX_SUBSCRIPTIONS} subscriptions already");
        }
        by_id.insert(
            token.to_owned(),
            Arc::new(Subscription {
                keys: UserAgentKeys {
                    private,
                    public,
                    auth,
                },
                server_key: server_key.to_vec(),
            }),
        );
        Ok(subscription)
    }

    /// From now on, every id the mock did not make is a seeded browser's
    /// ([`SeededKeys`]), its subscription made for `server_key`.
    pub fn accept_seeded(&self, server_key: &[u8]) -> Result<()> {
        let keys = SeededKeys::get()?;
        // A second call changes nothing: the server key is the mock's own.
        let _ = self.seeded.set((keys, server_key.to_vec()));
        Ok(())
    }

    /// The subscription `id`, if the mock made it or accepts seeded ones.
    pub fn get(&self, id: &str) -> Option<Known<'_>> {
        let made = self
            .by_id
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned();
        match (made, self.seeded.get()) {
            (Some(subscription), _) => Some(Known::Made(subscription)),
            (None, Some((keys, server_key))) => Some(Known::Seeded {
                keys: keys.keys_of(id),
                server_key,
            }),
            (None, None) => None,
        }
    }
}
