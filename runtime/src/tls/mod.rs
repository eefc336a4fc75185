//! TLS for Clarion's own links — PostgreSQL and RabbitMQ: the certificates
//! trusted (the system's store plus `CLARION_EXTRA_CA_FILE`), the three
//! levels of checking libpq's `sslmode` names, and a plain-words reason for
//! a handshake that failed.

mod failure;
mod verifiers;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tracing::debug;

pub use failure::{LinkError, TlsFailure};

use crate::settings::TlsSettings;

/// Longest a service waits, at start, for the one connection that proves a
/// TLS link works; a server that does not answer in time is not an error
/// (it may be starting too), only a failed handshake is.
pub const LINK_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the extra CA file {path}: {reason}")]
    ExtraCa { path: String, reason: String },
    #[error("no trusted certificate at all: the system store is empty and CLARION_EXTRA_CA_FILE is not set")]
    NoRoots,
    #[error("cannot build the certificate verifier: {0}")]
    Verifier(#[from] rustls::client::VerifierBuilderError),
}

/// How much of the server's certificate a TLS link checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// Signed by a trusted CA and issued for the host connected to
    /// (`sslmode=verify-full`, `amqps://`).
    Full,
    /// Signed by a trusted CA, whatever name it carries (`verify-ca`).
    ChainOnly,
    /// Encrypted, but the certificate is not checked at all (`require`):
    /// safe from eavesdroppers, not from someone in the middle.
    Nothing,
}

/// The certificates this process trusts, loaded once at start.
#[derive(Clone)]
pub struct Trust {
    /// Checks the chain and the name against the trusted roots.
    full: Arc<WebPkiServerVerifier>,
    /// `CLARION_EXTRA_CA_FILE` as read, for clients that take PEM (lapin).
    extra_ca_pem: Option<Arc<str>>,
}

impl Trust {
    /// The system's trust store plus the extra CA file; an extra CA file
    /// that cannot be read or holds no certificate is an error.
    pub fn load(settings: &TlsSettings) -> Result<Self, TlsError> {
        install_crypto_provider();
        let mut roots = RootCertStore::empty();
        let system = rustls_native_certs::load_native_certs();
        for error in &system.errors {
            debug!(error = %error, "part of the system trust store could not be read");
        }
        roots.add_parsable_certificates(system.certs);
        let extra_ca_pem = match &settings.extra_ca_file {
            Some(path) => Some(add_extra_ca(&mut roots, path)?),
            None => None,
        };
        if roots.is_empty() {
            return Err(TlsError::NoRoots);
        }
        Ok(Self {
            full: WebPkiServerVerifier::builder(Arc::new(roots)).build()?,
            extra_ca_pem,
        })
    }

    /// The extra CA certificates, PEM, if any were given.
    pub fn extra_ca_pem(&self) -> Option<&str> {
        self.extra_ca_pem.as_deref()
    }

    /// A client configuration checking the server as `verification` says.
    pub fn client_config(&self, verification: Verification) -> Arc<ClientConfig> {
        let verifier: Arc<dyn ServerCertVerifier> = match verification {
            Verification::Full => self.full.clone(),
            Verification::ChainOnly => verifiers::chain_only(self.full.clone()),
            Verification::Nothing => verifiers::nothing(),
        };
        let config = ClientConfig::builder()
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Arc::new(config)
    }
}

/// Adds every certificate of the PEM file at `path`; returns the file.
fn add_extra_ca(roots: &mut RootCertStore, path: &Path) -> Result<Arc<str>, TlsError> {
    let fail = |reason: String| TlsError::ExtraCa {
        path: path.display().to_string(),
        reason,
    };
    let pem = std::fs::read_to_string(path).map_err(|err| fail(err.to_string()))?;
    let mut added = 0;
    for certificate in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        let certificate = certificate.map_err(|err| fail(err.to_string()))?;
        roots.add(certificate).map_err(|err| fail(err.to_string()))?;
        added += 1;
    }
    if added == 0 {
        return Err(fail("it holds no PEM certificate".into()));
    }
    Ok(pem.into())
}

/// rustls needs one process-wide crypto provider (ring and aws-lc-rs are
/// both in the tree); Clarion uses aws-lc-rs. Installing twice is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}
