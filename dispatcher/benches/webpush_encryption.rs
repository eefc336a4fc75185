//! The cost of encrypting one web push (RFC 8291, `aes128gcm`) alone, with
//! the code the web dispatcher runs (`clarion_dispatcher::webpush::encrypt`,
//! on aws-lc-rs): a fresh P-256 key pair and an ECDH agreement with the
//! subscription's key, two HKDFs (the input keying material, then the
//! content key and nonce) and AES-128-GCM over one record. The issue's
//! target holds the dispatcher's CPU per push to within 1.5× of this
//! figure; `clarion-bench webpush` measures that side.
//!
//! Two clocks: `webpush/…` is criterion's wall time; `webpush_cpu/…` the
//! benchmark thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`), the figure
//! to compare with a process's CPU per push on a box shared with other
//! work.
//!
//! `webpush_cpu/web_push_native` is for comparison only, not what the
//! dispatcher runs: the `web-push-native` crate (RustCrypto's P-256), which
//! it ran before.
//!
//! `cargo bench -p clarion-dispatcher --bench webpush_encryption`

use std::hint::black_box;
use std::time::Duration;

use clarion_dispatcher::webpush::encrypt::encrypt;
use clarion_proto::web_push::base64url_decode;
use clarion_proto::{WebSubscription, WebSubscriptionKeys};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nix::time::{ClockId, clock_gettime};
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

/// This thread's CPU time so far (`CLOCK_THREAD_CPUTIME_ID`: exact, where
/// `/proc/thread-self/schedstat` advances only at the scheduler's ticks and
/// reads zero over a short batch).
fn thread_cpu() -> Duration {
    let now = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).expect("the thread's CPU clock");
    Duration::from(now)
}

fn encryption(c: &mut Criterion) {
    let subscription = WebSubscription {
        endpoint: "https://push.example/send/1".into(),
        keys: WebSubscriptionKeys {
            p256dh: UA_PUBLIC.into(),
            auth: UA_AUTH.into(),
        },
    };
    let plaintext = plaintext();
    let key_bytes = subscription.public_key().expect("the RFC's key is on P-256");
    let auth_bytes = subscription.auth_secret().expect("the RFC's auth secret");

    // Both encryptions open with `web-push-native`'s own decryption.
    let ua_secret = SecretKey::from_slice(&base64url_decode(UA_PRIVATE).expect("base64url"))
        .expect("the RFC's private key");
    let public = PublicKey::from_sec1_bytes(&key_bytes).expect("the RFC's key is on P-256");
    let auth = web_push_native::Auth::clone_from_slice(&auth_bytes);
    for body in [
        web_push_native::encrypt(plaintext.clone(), &public, &auth).expect("encrypts"),
        encrypt(&plaintext, &key_bytes, &auth_bytes).expect("encrypts"),
    ] {
        let opened = web_push_native::decrypt(body, &ua_secret, &auth).expect("opens");
        assert_eq!(opened, plaintext);
    }

    // What the dispatcher does per push: the subscription's key and auth
    // secret decoded (the key checked to lie on P-256), then the message
    // encrypted.
    let per_message = || {
        let subscription = black_box(&subscription);
        let key = subscription.public_key().expect("on the curve");
        let auth = subscription.auth_secret().expect("16 bytes");
        encrypt(black_box(&plaintext), &key, &auth).expect("encrypts")
    };
    let web_push_native = || {
        let public = PublicKey::from_sec1_bytes(black_box(&key_bytes)).expect("on the curve");
        let auth = web_push_native::Auth::clone_from_slice(black_box(&auth_bytes));
        web_push_native::encrypt(black_box(plaintext.clone()), &public, &auth).expect("encrypts")
    };

    let mut wall = c.benchmark_group("webpush");
    wall.throughput(Throughput::Elements(1));
    wall.bench_function("per_message", |b| b.iter(per_message));
    // Its parts: the encryption (ECDH with a fresh key pair, two HKDFs,
    // AES-GCM), the subscription's decoding.
    wall.bench_function("encrypt", |b| {
        b.iter(|| encrypt(black_box(&plaintext), &key_bytes, &auth_bytes).expect("encrypts"))
    });
    wall.bench_function("decode_key", |b| {
        b.iter(|| black_box(&subscription).public_key().expect("on the curve"))
    });
    wall.finish();

    let mut cpu = c.benchmark_group("webpush_cpu");
    cpu.throughput(Throughput::Elements(1));
    cpu.bench_function("per_message", |b| b.iter_custom(|n| cpu_time(n, per_message)));
    cpu.bench_function("web_push_native", |b| {
        b.iter_custom(|n| cpu_time(n, web_push_native))
    });
    cpu.finish();
}

/// The thread's CPU time for `iterations` runs of `work`.
fn cpu_time<T>(iterations: u64, work: impl Fn() -> T) -> Duration {
    let before = thread_cpu();
    for _ in 0..iterations {
        black_box(work());
    }
    thread_cpu().saturating_sub(before)
}

criterion_group!(benches, encryption);
criterion_main!(benches);
