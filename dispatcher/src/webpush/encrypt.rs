//! Message encryption for web push: RFC 8291 over RFC 8188's `aes128gcm`
//! content coding, one record, on aws-lc-rs's primitives (P-256 ECDH,
//! HKDF-SHA-256, AES-128-GCM). The composition follows RFC 8291 §3.4 step
//! by step; the primitives are the library's (about five times cheaper per
//! message than RustCrypto's P-256, which `web-push-native` uses: issue 37).
//!
//! Checked three ways: against RFC 8291 Appendix A byte for byte (fixed
//! key pair and salt), by `web-push-native`'s own `decrypt` (another
//! composition on other primitives), and by the mock push service's
//! decryption in every web push test.

use aws_lc_rs::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::agreement::{self, ECDH_P256, PrivateKey, UnparsedPublicKey};
use aws_lc_rs::hkdf::{HKDF_SHA256, KeyType, Salt};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use clarion_proto::web_push::{AUTH_BYTES, P256DH_BYTES as PUBLIC_KEY_BYTES};

/// The record size written in the header: RFC 8291's example's, and what
/// browsers expect; a web push message is one record well under it.
const RECORD_SIZE: u32 = 4096;
const SALT_BYTES: usize = 16;
const TAG_BYTES: usize = 16;
/// The padding delimiter of the last (here, the only) record.
const LAST_RECORD: u8 = 0x02;
/// Salt, record size, key id length, then the key id (the sender's key).
const HEADER_BYTES: usize = SALT_BYTES + 4 + 1 + PUBLIC_KEY_BYTES;

/// Why a message could not be encrypted for a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncryptError {
    /// The subscription's key is not a point on P-256.
    #[error("the subscription's key is not a P-256 public key")]
    BadKey,
    /// The message does not fit one record.
    #[error("the message is too long for one record")]
    TooLong,
    /// The system's random source or the library failed.
    #[error("the crypto library failed")]
    Library,
}

/// The `aes128gcm` body of `plaintext` for the subscription whose key and
/// auth secret these are, with a fresh key pair and salt.
pub fn encrypt(
    plaintext: &[u8],
    ua_public: &[u8; PUBLIC_KEY_BYTES],
    auth: &[u8; AUTH_BYTES],
) -> Result<Vec<u8>, EncryptError> {
    let rng = SystemRandom::new();
    let ephemeral = PrivateKey::generate(&ECDH_P256).map_err(|_| EncryptError::Library)?;
    let mut salt = [0u8; SALT_BYTES];
    rng.fill(&mut salt).map_err(|_| EncryptError::Library)?;
    encrypt_with(&ephemeral, salt, plaintext, ua_public, auth)
}

/// RFC 8291 §3.4 with a given key pair and salt (fixed in the RFC's
/// example, fresh for every real message).
fn encrypt_with(
    ephemeral: &PrivateKey,
    salt: [u8; SALT_BYTES],
    plaintext: &[u8],
    ua_public: &[u8; PUBLIC_KEY_BYTES],
    auth: &[u8; AUTH_BYTES],
) -> Result<Vec<u8>, EncryptError> {
    if plaintext.len() + 1 + TAG_BYTES > RECORD_SIZE as usize {
        return Err(EncryptError::TooLong);
    }
    let as_public = ephemeral
        .compute_public_key()
        .map_err(|_| EncryptError::Library)?;
    let as_public = as_public.as_ref();
    let ecdh_secret = agreement::agree(
        ephemeral,
        UnparsedPublicKey::new(&ECDH_P256, ua_public),
        EncryptError::BadKey,
        |secret| Ok(secret.to_vec()),
    )?;

    // PRK_key = HMAC(auth, ecdh); IKM = HKDF-Expand(PRK_key, key_info, 32).
    let mut key_info = Vec::with_capacity(14 + 2 * PUBLIC_KEY_BYTES);
    key_info.extend_from_slice(b"WebPush: info\0");
    key_info.extend_from_slice(ua_public);
    key_info.extend_from_slice(as_public);
    let mut ikm = [0u8; 32];
    hkdf(auth, &ecdh_secret, &key_info, &mut ikm)?;
    // RFC 8188 §2.2 and §2.3: the content key and the nonce from the salt.
    let mut cek = [0u8; 16];
    hkdf(&salt, &ikm, b"Content-Encoding: aes128gcm\0", &mut cek)?;
    let mut nonce = [0u8; 12];
    hkdf(&salt, &ikm, b"Content-Encoding: nonce\0", &mut nonce)?;

    let mut body = Vec::with_capacity(HEADER_BYTES + plaintext.len() + 1 + TAG_BYTES);
    body.extend_from_slice(&salt);
    body.extend_from_slice(&RECORD_SIZE.to_be_bytes());
    body.push(PUBLIC_KEY_BYTES as u8);
    body.extend_from_slice(as_public);
    let mut record = body.split_off(HEADER_BYTES);
    record.extend_from_slice(plaintext);
    record.push(LAST_RECORD);
    let key = UnboundKey::new(&AES_128_GCM, &cek).map_err(|_| EncryptError::Library)?;
    LessSafeKey::new(key)
        .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut record)
        .map_err(|_| EncryptError::Library)?;
    body.extend_from_slice(&record);
    Ok(body)
}

/// An HKDF output length.
struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

fn hkdf(salt: &[u8], ikm: &[u8], info: &[u8], out: &mut [u8]) -> Result<(), EncryptError> {
    Salt::new(HKDF_SHA256, salt)
        .extract(ikm)
        .expand(&[info], Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .map_err(|_| EncryptError::Library)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_proto::web_push::base64url_decode;

    // RFC 8291 Appendix A.
    const PLAINTEXT: &[u8] = b"When I grow up, I want to be a watermelon";
    const UA_PRIVATE: &str = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94";
    const UA_PUBLIC: &str =
        "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
    const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";
    const AS_PRIVATE: &str = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw";
    const SALT: &str = "DGv6ra1nlYgDCS1FRnbzlw";
    const BODY: &str = "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN";

    fn decoded<const N: usize>(text: &str) -> [u8; N] {
        base64url_decode(text)
            .expect("base64url")
            .try_into()
            .expect("its length")
    }

    #[test]
    fn the_rfc_8291_example_encrypts_byte_for_byte() {
        let ephemeral = PrivateKey::from_private_key(&ECDH_P256, &base64url_decode(AS_PRIVATE).unwrap())
            .expect("the RFC's sender key");
        let body = encrypt_with(
            &ephemeral,
            decoded(SALT),
            PLAINTEXT,
            &decoded(UA_PUBLIC),
            &decoded(AUTH),
        )
        .unwrap();
        assert_eq!(body, base64url_decode(BODY).unwrap());
    }

    #[test]
    fn another_implementation_opens_a_fresh_message() {
        let body = encrypt(PLAINTEXT, &decoded(UA_PUBLIC), &decoded(AUTH)).unwrap();
        let secret = web_push_native::p256::SecretKey::from_slice(&base64url_decode(UA_PRIVATE).unwrap())
            .expect("the RFC's browser key");
        let auth = web_push_native::Auth::clone_from_slice(&decoded::<AUTH_BYTES>(AUTH));
        let opened = web_push_native::decrypt(body.clone(), &secret, &auth).expect("opens");
        assert_eq!(opened, PLAINTEXT);
        // A fresh key pair and salt each time.
        let again = encrypt(PLAINTEXT, &decoded(UA_PUBLIC), &decoded(AUTH)).unwrap();
        assert_ne!(body[..HEADER_BYTES], again[..HEADER_BYTES]);
    }

    #[test]
    fn a_key_off_the_curve_and_a_message_over_one_record_are_refused() {
        let mut off_curve: [u8; PUBLIC_KEY_BYTES] = decoded(UA_PUBLIC);
        off_curve[40] ^= 1;
        assert_eq!(
            encrypt(PLAINTEXT, &off_curve, &decoded(AUTH)),
            Err(EncryptError::BadKey)
        );
        assert_eq!(
            encrypt(&[b'x'; 4096], &decoded(UA_PUBLIC), &decoded(AUTH)),
            Err(EncryptError::TooLong)
        );
    }
}
