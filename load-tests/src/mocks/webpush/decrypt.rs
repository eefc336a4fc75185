//! Opening a push message as the browser does: RFC 8291 (Message
//! Encryption for Web Push) over RFC 8188's `aes128gcm` content coding.
//!
//! Written for the mock on aws-lc-rs's ECDH, HKDF and AES-GCM, apart from
//! the dispatcher's encryption (`clarion_dispatcher::webpush::encrypt`), so
//! the two compositions check each other; the dispatcher's is also checked
//! against RFC 8291's example and `web-push-native`'s decryption (another
//! composition on RustCrypto's primitives).

use aws_lc_rs::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::agreement::{self, ECDH_P256, PrivateKey, UnparsedPublicKey};
use aws_lc_rs::hkdf::{HKDF_SHA256, KeyType, Salt};

/// The salt, the record size, the key id's length.
const HEADER: usize = 16 + 4 + 1;
/// An uncompressed P-256 point, the key id RFC 8291 requires.
const PUBLIC_KEY: usize = 65;
const TAG: usize = 16;
/// The padding delimiter of the last (for web push, the only) record.
const LAST_RECORD: u8 = 0x02;

/// Why a message could not be opened: the mock's answer names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecryptError {
    #[error("the aes128gcm header is truncated")]
    Truncated,
    #[error("the key id is not an uncompressed P-256 public key")]
    KeyId,
    #[error("the record size is too small")]
    RecordSize,
    #[error("a web push message is one record (RFC 8291 §4)")]
    Records,
    #[error("the ECDH agreement failed")]
    Agreement,
    #[error("the record does not authenticate")]
    Authentication,
    #[error("the record's padding has no final delimiter")]
    Padding,
}

/// The user agent's side of a subscription: its ECDH key and auth secret.
pub struct UserAgentKeys {
    pub private: PrivateKey,
    /// `p256dh`: the uncompressed public key.
    pub public: Vec<u8>,
    /// `auth`: 16 random bytes.
    pub auth: [u8; 16],
}

/// An HKDF output length.
struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-SHA-256 of `ikm` with `salt` and `info`, `out.len()` bytes.
fn hkdf(salt: &[u8], ikm: &[u8], info: &[u8], out: &mut [u8]) -> Result<(), DecryptError> {
    Salt::new(HKDF_SHA256, salt)
        .extract(ikm)
        .expand(&[info], Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .map_err(|_| DecryptError::Agreement)
}

/// The plaintext of `body`, an `aes128gcm` message to `keys`.
pub fn decrypt(keys: &UserAgentKeys, body: &[u8]) -> Result<Vec<u8>, DecryptError> {
    if body.len() < HEADER {
        return Err(DecryptError::Truncated);
    }
    let (salt, rest) = body.split_at(16);
    let record_size = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    let key_id_len = usize::from(rest[4]);
    let rest = &rest[5..];
    if key_id_len != PUBLIC_KEY || rest.len() < key_id_len {
        return Err(DecryptError::KeyId);
    }
    let (sender_public, ciphertext) = rest.split_at(key_id_len);
    if record_size < TAG + 2 {
        return Err(DecryptError::RecordSize);
    }
    if ciphertext.len() > record_size || ciphertext.len() < TAG + 1 {
        return Err(DecryptError::Records);
    }

    // RFC 8291 §3.3–3.4: the input keying material from the ECDH secret
    // and the auth secret, keyed to both public keys.
    let ecdh_secret = agreement::agree(
        &keys.private,
        UnparsedPublicKey::new(&ECDH_P256, sender_public),
        DecryptError::KeyId,
        |secret| Ok(secret.to_vec()),
    )?;
    let mut key_info = b"WebPush: info\0".to_vec();
    key_info.extend_from_slice(&keys.public);
    key_info.extend_from_slice(sender_public);
    let mut ikm = [0u8; 32];
    hkdf(&keys.auth, &ecdh_secret, &key_info, &mut ikm)?;

    // RFC 8188 §2.2–2.3: the content-encryption key and the nonce.
    let mut cek = [0u8; 16];
    hkdf(salt, &ikm, b"Content-Encoding: aes128gcm\0", &mut cek)?;
    let mut nonce = [0u8; 12];
    hkdf(salt, &ikm, b"Content-Encoding: nonce\0", &mut nonce)?;

    // One record, sequence number 0: the nonce as derived.
    let key = UnboundKey::new(&AES_128_GCM, &cek).map_err(|_| DecryptError::Agreement)?;
    let mut record = ciphertext.to_vec();
    let opened = LessSafeKey::new(key)
        .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut record)
        .map_err(|_| DecryptError::Authentication)?;
    let end = opened
        .iter()
        .rposition(|byte| *byte != 0)
        .ok_or(DecryptError::Padding)?;
    if opened[end] != LAST_RECORD {
        return Err(DecryptError::Padding);
    }
    Ok(opened[..end].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8291 Appendix A: the worked example, byte for byte.
    #[test]
    fn opens_the_rfc_8291_example() {
        let b64 = |text: &str| clarion_proto::web_push::base64url_decode(text).expect("base64url");
        let private =
            PrivateKey::from_private_key(&ECDH_P256, &b64("q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"))
                .expect("the user agent's private key");
        let public =
            b64("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4");
        let mut auth = [0u8; 16];
        auth.copy_from_slice(&b64("BTBZMqHH6r4Tts7J_aSIgg"));
        let keys = UserAgentKeys {
            private,
            public,
            auth,
        };
        let body = b64(concat!(
            "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27ml",
            "mlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPT",
            "pK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN",
        ));
        assert_eq!(
            decrypt(&keys, &body).as_deref(),
            Ok(&b"When I grow up, I want to be a watermelon"[..])
        );
        let mut tampered = body.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert_eq!(decrypt(&keys, &tampered), Err(DecryptError::Authentication));
        assert_eq!(decrypt(&keys, &body[..20]), Err(DecryptError::Truncated));
    }
}
