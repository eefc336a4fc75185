//! Subscriptions for seeded audiences: the demo's and the benchmark's
//! browsers, hundreds of thousands of them written straight into the
//! database, cannot each be made one by one with a key the mock holds in
//! memory. Instead a few user-agent key pairs are derived from fixed labels
//! (as the synthetic tokens are), each browser uses the one its token picks,
//! and a mock that accepts seeded subscriptions
//! ([`super::WebPushMock::accept_seeded`]) opens their pushes with the same
//! keys. Many browsers sharing a key pair changes nothing for the sender:
//! every message still has its own ephemeral key and salt.

use std::sync::OnceLock;

use anyhow::{Context, Result};
use aws_lc_rs::agreement::{ECDH_P256, PrivateKey};
use clarion_proto::web_push::base64url;
use sha2::{Digest, Sha256};

use super::decrypt::UserAgentKeys;
use super::subscriptions::{PUSH_PATH, TestSubscription};

/// How many key pairs the seeded browsers share.
pub const SEEDED_KEY_PAIRS: usize = 8;

/// The seeded key pairs, derived once per process.
pub struct SeededKeys {
    pairs: Vec<UserAgentKeys>,
    /// Their public keys and auth secrets, base64url, as subscriptions carry them.
    encoded: Vec<(String, String)>,
}

impl SeededKeys {
    /// The key pairs every process derives alike.
    pub fn get() -> Result<&'static SeededKeys> {
        static KEYS: OnceLock<SeededKeys> = OnceLock::new();
        if let Some(keys) = KEYS.get() {
            return Ok(keys);
        }
        let keys = Self::derive()?;
        Ok(KEYS.get_or_init(|| keys))
    }

    fn derive() -> Result<Self> {
        let mut pairs = Vec::with_capacity(SEEDED_KEY_PAIRS);
        for index in 0..SEEDED_KEY_PAIRS {
            // A SHA-256 digest is a valid P-256 scalar but for a chance of
            // about 2^-32; these labels were checked (the tests derive them).
            let scalar = Sha256::digest(format!("clarion-seeded-browser-key-{index}").as_bytes());
            let private = PrivateKey::from_private_key(&ECDH_P256, &scalar)
                .context("a seeded browser key is not a P-256 scalar")?;
            let public = private
                .compute_public_key()
                .context("a seeded browser's public key")?
                .as_ref()
                .to_vec();
            let mut auth = [0u8; 16];
            auth.copy_from_slice(
                &Sha256::digest(format!("clarion-seeded-browser-auth-{index}").as_bytes())[..16],
            );
            pairs.push(UserAgentKeys {
                private,
                public,
                auth,
            });
        }
        let encoded = pairs
            .iter()
            .map(|keys| (base64url(&keys.public), base64url(&keys.auth)))
            .collect();
        Ok(Self { pairs, encoded })
    }

    /// The key pair browser `token` uses.
    pub fn keys_of(&self, token: &str) -> &UserAgentKeys {
        &self.pairs[index_of(token)]
    }

    /// Browser `token`'s subscription on the push service at `origin`.
    pub fn subscription(&self, origin: &str, token: &str) -> TestSubscription {
        let (p256dh, auth) = &self.encoded[index_of(token)];
        TestSubscription {
            token: token.to_owned(),
            endpoint: format!("{origin}{PUSH_PATH}{token}"),
            p256dh: p256dh.clone(),
            auth: auth.clone(),
        }
    }
}

/// Which key pair `token` uses: a hash of it, so the seeder and the mock
/// agree without sharing anything but the token.
fn index_of(token: &str) -> usize {
    (xxhash_rust::xxh3::xxh3_64(token.as_bytes()) % SEEDED_KEY_PAIRS as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mocks::webpush::decrypt::decrypt;
    use clarion_proto::web_push::base64url_decode;

    #[test]
    fn a_seeded_subscription_opens_with_the_keys_its_token_picks() {
        let keys = SeededKeys::get().expect("the seeded keys derive");
        let subscription = keys.subscription("https://127.0.0.1:4433", "web0123456789abcdef");
        assert_eq!(
            subscription.endpoint,
            "https://127.0.0.1:4433/push/web0123456789abcdef"
        );
        // Encrypted by the dispatcher's code to the subscription as stored.
        let key = base64url_decode(&subscription.p256dh).expect("base64url");
        let auth = base64url_decode(&subscription.auth).expect("base64url");
        let body = clarion_dispatcher::webpush::encrypt::encrypt(
            b"seeded",
            &key.try_into().expect("65 bytes"),
            &auth.try_into().expect("16 bytes"),
        )
        .expect("encrypts");
        let opened = decrypt(keys.keys_of(&subscription.token), &body);
        assert_eq!(opened.as_deref(), Ok(&b"seeded"[..]));
        // The tokens spread over every key pair.
        let used: std::collections::HashSet<usize> = (0..200).map(|n| index_of(&format!("web{n}"))).collect();
        assert_eq!(used.len(), SEEDED_KEY_PAIRS);
    }
}
