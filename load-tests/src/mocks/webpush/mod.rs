//! A mock web push service (RFC 8030), playing the browsers' push
//! services (FCM's, Mozilla's autopush, Apple's) over HTTPS, HTTP/2 or
//! HTTP/1.1 as ALPN negotiates, with the same test CA set-up as the APNs
//! and FCM mocks.
//!
//! It mints the application server's VAPID key (written as PEM for
//! `CLARION_VAPID_PRIVATE_KEY_FILE`), makes subscriptions for the tests
//! ([`WebPushMock::subscribe`]) and checks each push as [`push`] says:
//! VAPID ([`vapid`]), headers, and the body opened with the subscription's
//! keys by the mock's own RFC 8291 code ([`decrypt`]); seeded audiences'
//! browsers share a few key pairs ([`seeded`]), and a benchmark may have
//! only a sample of the pushes opened. Counts, faults,
//! kept pushes (their decrypted messages) and receipts are the shared
//! pieces every mock has ([`super::control`]).

pub mod decrypt;
pub mod push;
pub mod seeded;
pub mod subscriptions;
pub mod vapid;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256};

use super::control::{self, MockState};
use super::phones::ReceiptsConfig;
use super::server::{Listener, Protocols, serve_tls};
use super::tls::TestPki;
use push::PushService;
use subscriptions::Subscriptions;
pub use subscriptions::TestSubscription;

/// Where to listen and what to mint.
#[derive(Debug, Clone)]
pub struct WebPushMockConfig {
    pub addr: SocketAddr,
    pub control_addr: SocketAddr,
    /// Where the CA certificate and the VAPID key are written.
    pub dir: PathBuf,
    /// The VAPID subject the dispatcher is given.
    pub subject: String,
    /// The phones (here, browsers) behind the mock post receipts when set.
    pub receipts: Option<ReceiptsConfig>,
}

impl WebPushMockConfig {
    /// Free ports on 127.0.0.1, files under `dir`.
    pub fn local(dir: PathBuf) -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            control_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            dir,
            subject: "mailto:push@clarion.test".into(),
            receipts: None,
        }
    }
}

/// A running mock; stops when dropped.
pub struct WebPushMock {
    /// `https://127.0.0.1:<port>`: the push service's origin.
    pub origin: String,
    pub control: String,
    pub ca_file: PathBuf,
    /// The application server's VAPID private key (PEM, PKCS #8).
    pub vapid_key_file: PathBuf,
    pub vapid_subject: String,
    /// Its public key, uncompressed: what subscriptions are bound to.
    pub vapid_public_key: Vec<u8>,
    pub state: Arc<MockState>,
    /// The host the push service listens on (the allow-list's entry).
    host: String,
    subscriptions: Arc<Subscriptions>,
    service: Arc<PushService>,
    _push: Listener,
    _control: Listener,
}

impl WebPushMock {
    pub async fn start(config: WebPushMockConfig) -> Result<Self> {
        let pki = TestPki::generate("web push")?;
        let ca_file = config.dir.join("webpush-ca.pem");
        pki.write_ca(&ca_file)?;
        let vapid = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).context("generating the VAPID key")?;
        let vapid_key_file = config.dir.join("vapid-private-key.pem");
        std::fs::write(&vapid_key_file, vapid.serialize_pem())
            .with_context(|| format!("writing {}", vapid_key_file.display()))?;

        let (state, control) = control::start(config.control_addr, config.receipts)
            .await
            .context("binding the mock's control API")?;
        let subscriptions = Arc::new(Subscriptions::default());
        // Bind first: the origin (the JWTs' audience) names the port.
        let addr = {
            let probe = std::net::TcpListener::bind(config.addr)?;
            probe.local_addr()?
        };
        let origin = format!("https://{addr}");
        let service = Arc::new(PushService::new(
            state.clone(),
            subscriptions.clone(),
            origin.clone(),
        ));
        let serving = service.clone();
        let push = serve_tls(
            addr,
            pki.server_config(Protocols::Http2AndHttp1.alpn())?,
            move |request, _| {
                let service = serving.clone();
                async move { service.handle(request).await }
            },
        )
        .await
        .context("binding the web push mock")?;
        Ok(Self {
            origin,
            control: format!("http://{}", control.addr),
            ca_file,
            vapid_key_file,
            vapid_subject: config.subject,
            vapid_public_key: vapid.public_key_raw().to_vec(),
            state,
            host: addr.ip().to_string(),
            subscriptions,
            service,
            _push: push,
            _control: control,
        })
    }

    /// A new subscription `token` on this push service, for this mock's
    /// VAPID key, as a browser's `pushManager.subscribe()` makes one. The
    /// token (16–128 of `[A-Za-z0-9_-]`) is the one to register it under.
    pub fn subscribe(&self, token: &str) -> Result<TestSubscription> {
        self.subscriptions
            .create(&self.origin, token, &self.vapid_public_key)
    }

    /// From now on the mock also knows every seeded browser
    /// ([`seeded::SeededKeys`]): any id it did not make is one, subscribed
    /// for this mock's VAPID key.
    pub fn accept_seeded(&self) -> Result<()> {
        self.subscriptions.accept_seeded(&self.vapid_public_key)
    }

    /// Seeded browser `token`'s subscription on this push service.
    pub fn seeded_subscription(&self, token: &str) -> Result<TestSubscription> {
        Ok(seeded::SeededKeys::get()?.subscription(&self.origin, token))
    }

    /// Opens one push in `n` (the rest are checked but for their body, and
    /// accepted): for benchmarks, where decrypting every message would
    /// take the machine the sender is measured on. Tests keep the default,
    /// every push opened.
    pub fn decrypt_one_in(&self, n: u32) {
        self.service
            .decrypt_one_in
            .store(n.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// The dispatcher settings that point at this mock.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "CLARION_VAPID_PRIVATE_KEY_FILE".into(),
                self.vapid_key_file.display().to_string(),
            ),
            ("CLARION_VAPID_SUBJECT".into(), self.vapid_subject.clone()),
            ("CLARION_WEBPUSH_ALLOWED_HOSTS".into(), self.host.clone()),
        ]
    }

    /// The apps file table (`[apps.<app>.webpush]`) of an app whose
    /// application server key is this mock's.
    pub fn app_table(&self, app: &str) -> String {
        format!(
            "[apps.{app}.webpush]\nvapid_private_key_file = {key:?}\nvapid_subject = {subject:?}\n",
            key = self.vapid_key_file.display().to_string(),
            subject = self.vapid_subject,
        )
    }
}
