//! TLS for every outbound client: the built-in (Mozilla) roots plus the
//! certificates of `CLARION_EXTRA_CA_FILE`.

use std::path::Path;
use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the extra CA file {path}: {reason}")]
    ExtraCa { path: String, reason: String },
}

/// A client configuration trusting the usual roots and `extra_ca`, offering
/// the given ALPN protocols.
pub fn client_config(extra_ca: Option<&Path>, alpn: &[&[u8]]) -> Result<Arc<ClientConfig>, TlsError> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = extra_ca {
        let fail = |reason: String| TlsError::ExtraCa {
            path: path.display().to_string(),
            reason,
        };
        let certificates = CertificateDer::pem_file_iter(path).map_err(|err| fail(err.to_string()))?;
        let mut added = 0;
        for certificate in certificates {
            let certificate = certificate.map_err(|err| fail(err.to_string()))?;
            roots.add(certificate).map_err(|err| fail(err.to_string()))?;
            added += 1;
        }
        if added == 0 {
            return Err(fail("it holds no PEM certificate".into()));
        }
    }
    let mut config = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}
