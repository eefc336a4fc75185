//! The cost of encrypting one web push (RFC 8291, `aes128gcm`) alone, with
//! the crate the web dispatcher uses (`web-push-native`, RustCrypto
//! underneath): a fresh P-256 key pair and an ECDH agreement with the
//! subscription's key, two HKDFs (the input keying material, then the
//! content key and nonce) and AES-128-GCM over one record. The issue's
//! target holds the dispatcher's CPU per push to within 1.5× of this
//! figure; `clarion-bench webpush` measures that side.
//!
//! Two clocks: `webpush/…` is criterion's wall time; `webpush_cpu/…` the
//! benchmark thread's own CPU time (the scheduler's count in
//! `/proc/thread-self/schedstat`), the figure to compare with a process's
//! CPU per push on a box shared with other work.
//!
//! `webpush_cpu/aws_lc_rs` is for comparison only, not what the dispatcher
//! runs: the same RFC 8291 composition on aws-lc-rs's ECDH, HKDF and
//! AES-GCM (the primitives already in the dependency tree), checked at
//! start-up to open with `web-push-native`'s own `decrypt`.
//!
//! `cargo bench -p clarion-dispatcher --bench webpush_encryption`

use std::hint::black_box;
use std::time::Duration;

use aws_lc_rs::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::agreement::{self, ECDH_P256, PrivateKey, UnparsedPublicKey};
use aws_lc_rs::hkdf::{HKDF_SHA256, KeyType, Salt};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use clarion_proto::web_push::base64url_decode;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use web_push_native::p256::{PublicKey, SecretKey};

/// RFC 8291 Appendix A's user agent: its key pair and auth secret.
const UA_PRIVATE: &str = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94";
const UA_PUBLIC: &str =
    "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
const UA_AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";

/// A breaking-news web payload of the size Clarion sends (the JSON a
/// service worker reads: title, body, link, notification id).
fn plaintext() -> Vec<u8> {
    serde_json::json!({
        "title": "Breaking news",
        "body": "Something important just happened. Tap for the full story.",
        "link": "https://news.example/live/2026/12/04/something-important",
        "image": "https://news.example/images/live.jpg",
        "data": {"section": "world"},
        "notification_id": "0192f0c4-6f1c-7a1e-9b43-1c2d3e4f5a6b",
    })
    .to_string()
    .into_bytes()
}

/// This thread's CPU time so far (the scheduler's count, nanoseconds).
fn thread_cpu() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let nanos = text
        .split_whitespace()
        .next()
        .and_then(|field| field.parse().ok())
        .unwrap_or(0);
    Duration::from_nanos(nanos)
}

/// An HKDF output length.
struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

fn hkdf(salt: &[u8], ikm: &[u8], info: &[u8], out: &mut [u8]) {
    Salt::new(HKDF_SHA256, salt)
        .extract(ikm)
        .expand(&[info], Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .expect("HKDF")
}

/// RFC 8291 on aws-lc-rs (comparison only): one record, the key id the
/// sender's public key, the same layout `web-push-native` writes.
fn encrypt_aws_lc(rng: &SystemRandom, plaintext: &[u8], ua_public: &[u8], auth: &[u8]) -> Vec<u8> {
    let ephemeral = PrivateKey::generate(&ECDH_P256).expect("a key pair");
    let as_public = ephemeral.compute_public_key().expect("its public key");
    let as_public = as_public.as_ref();
    let secret = agreement::agree(
        &ephemeral,
        UnparsedPublicKey::new(&ECDH_P256, ua_public),
        (),
        |secret| Ok(secret.to_vec()),
    )
    .expect("ECDH");
    let mut info = b"WebPush: info\0".to_vec();
    info.extend_from_slice(ua_public);
    info.extend_from_slice(as_public);
    let mut ikm = [0u8; 32];
    hkdf(auth, &secret, &info, &mut ikm);
    let mut salt = [0u8; 16];
    rng.fill(&mut salt).expect("random salt");
    let mut cek = [0u8; 16];
    hkdf(&salt, &ikm, b"Content-Encoding: aes128gcm\0", &mut cek);
    let mut nonce = [0u8; 12];
    hkdf(&salt, &ikm, b"Content-Encoding: nonce\0", &mut nonce);
    let mut record = Vec::with_capacity(plaintext.len() + 17);
    record.extend_from_slice(plaintext);
    record.push(0x02);
    let key = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &cek).expect("a key"));
    key.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut record)
        .expect("sealed");
    let record_size = u32::try_from(record.len()).expect("small");
    let mut body = Vec::with_capacity(16 + 4 + 1 + 65 + record.len());
    body.extend_from_slice(&salt);
    body.extend_from_slice(&record_size.to_be_bytes());
    body.push(65);
    body.extend_from_slice(as_public);
    body.extend_from_slice(&record);
    body
}

fn encryption(c: &mut Criterion) {
    let key_bytes = base64url_decode(UA_PUBLIC).expect("the RFC's key is base64url");
    let auth_bytes = base64url_decode(UA_AUTH).expect("the RFC's auth secret is base64url");
    let public = PublicKey::from_sec1_bytes(&key_bytes).expect("the RFC's key is on P-256");
    let auth = web_push_native::Auth::clone_from_slice(&auth_bytes);
    let plaintext = plaintext();
    let rng = SystemRandom::new();

    // Both encryptions open with the crate's own decryption.
    let ua_secret = SecretKey::from_slice(&base64url_decode(UA_PRIVATE).expect("base64url"))
        .expect("the RFC's private key");
    for body in [
        web_push_native::encrypt(plaintext.clone(), &public, &auth).expect("encrypts"),
        encrypt_aws_lc(&rng, &plaintext, &key_bytes, &auth_bytes),
    ] {
        let opened = web_push_native::decrypt(body, &ua_secret, &auth).expect("opens");
        assert_eq!(opened, plaintext);
    }

    let per_message = || {
        let public = PublicKey::from_sec1_bytes(black_box(&key_bytes)).expect("on the curve");
        let auth = web_push_native::Auth::clone_from_slice(black_box(&auth_bytes));
        web_push_native::encrypt(black_box(plaintext.clone()), &public, &auth).expect("encrypts")
    };

    let mut wall = c.benchmark_group("webpush");
    wall.throughput(Throughput::Elements(1));
    // What the dispatcher does per push: the subscription's key decoded
    // (a point check on P-256), then the message encrypted.
    wall.bench_function("per_message", |b| b.iter(per_message));
    // Its parts: the encryption (ECDH with a fresh key pair, two HKDFs,
    // AES-GCM), the key's decoding.
    wall.bench_function("encrypt", |b| {
        b.iter(|| web_push_native::encrypt(black_box(plaintext.clone()), &public, &auth).expect("encrypts"))
    });
    wall.bench_function("decode_key", |b| {
        b.iter(|| PublicKey::from_sec1_bytes(black_box(&key_bytes)).expect("on the curve"))
    });
    wall.finish();

    let mut cpu = c.benchmark_group("webpush_cpu");
    cpu.throughput(Throughput::Elements(1));
    cpu.bench_function("per_message", |b| {
        b.iter_custom(|iterations| {
            let before = thread_cpu();
            for _ in 0..iterations {
                black_box(per_message());
            }
            thread_cpu().saturating_sub(before)
        })
    });
    cpu.bench_function("aws_lc_rs", |b| {
        b.iter_custom(|iterations| {
            let before = thread_cpu();
            for _ in 0..iterations {
                black_box(encrypt_aws_lc(&rng, &plaintext, &key_bytes, &auth_bytes));
            }
            thread_cpu().saturating_sub(before)
        })
    });
    cpu.finish();
}

criterion_group!(benches, encryption);
criterion_main!(benches);
