//! The mocks' TLS: a test CA generated at start (written as PEM so clients
//! can trust it through `CLARION_EXTRA_CA_FILE`) and a server certificate
//! it signs for `localhost` and `127.0.0.1`.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls::ServerConfig;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA and one server certificate signed by it.
pub struct TestPki {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    server_cert: CertificateDer<'static>,
    server_key: PrivatePkcs8KeyDer<'static>,
}

impl TestPki {
    pub fn generate(name: &str) -> Result<Self> {
        install_crypto_provider();
        let ca_key = KeyPair::generate().context("generating the CA key")?;
        let mut ca_params = CertificateParams::default();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let mut ca_name = DistinguishedName::new();
        ca_name.push(DnType::CommonName, format!("Clarion test CA ({name})"));
        ca_params.distinguished_name = ca_name;
        let ca_cert = ca_params.self_signed(&ca_key).context("signing the CA")?;
        let issuer = Issuer::new(ca_params, ca_key);

        let server_key = KeyPair::generate().context("generating the server key")?;
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).context("server names")?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let mut server_name = DistinguishedName::new();
        server_name.push(DnType::CommonName, format!("{name} mock"));
        params.distinguished_name = server_name;
        let server_cert = params
            .signed_by(&server_key, &issuer)
            .context("signing the server certificate")?;
        Ok(Self {
            ca_pem: ca_cert.pem(),
            server_cert: server_cert.der().clone(),
            server_key: PrivatePkcs8KeyDer::from(server_key.serialize_der()),
        })
    }

    /// Writes the CA certificate where clients are told to look for it.
    pub fn write_ca(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, &self.ca_pem).with_context(|| format!("writing {}", path.display()))
    }

    /// A server configuration offering exactly `alpn` (e.g. only `h2`).
    pub fn server_config(&self, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>> {
        let mut config = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![self.server_cert.clone()],
                PrivateKeyDer::Pkcs8(self.server_key.clone_key()),
            )
            .context("server TLS configuration")?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }
}

/// rustls needs one process-wide crypto provider; Clarion uses aws-lc-rs.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}
