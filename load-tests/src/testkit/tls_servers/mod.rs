//! Throw-away PostgreSQL and RabbitMQ servers that speak TLS only, with a
//! server certificate from a test CA, for the tests of Clarion's encrypted
//! links. Each server is killed and its directory removed when dropped. A
//! server binary missing from the machine fails the test with a message
//! naming the package (`./scripts/test` installs both).
//!
//! The certificate is issued for `localhost` only: connecting by
//! `127.0.0.1` reaches the same server under a name the certificate does
//! not list (the hostname-mismatch case).

mod postgres;
mod rabbitmq;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose,
};

use super::scratch::{free_port, log_tail, scratch_dir};

pub use postgres::TlsPostgres;
pub use rabbitmq::TlsRabbitMq;

/// The only name the servers' certificate is issued for.
pub const CERTIFICATE_HOST: &str = "localhost";

/// A test CA, the server certificate it signs, and an unrelated CA that
/// must not be trusted for these servers; all written as PEM in `dir`.
pub struct TestCa {
    /// The CA that signed the servers' certificate.
    pub ca_file: PathBuf,
    /// Another CA: trusting only this one must fail.
    pub wrong_ca_file: PathBuf,
    cert_pem: String,
    key_pem: String,
    dir: PathBuf,
}

impl TestCa {
    pub fn generate() -> Result<Self> {
        crate::mocks::tls::install_crypto_provider();
        let dir = scratch_dir("clarion-tls-ca")?;
        let (ca_params, ca_key, ca_pem) = new_ca("Clarion link test CA")?;
        let (_, _, wrong_pem) = new_ca("Clarion unrelated test CA")?;
        let issuer = Issuer::new(ca_params, ca_key);
        let server_key = KeyPair::generate().context("generating the server key")?;
        let mut params = CertificateParams::new(vec![CERTIFICATE_HOST.to_owned()]).context("server names")?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, CERTIFICATE_HOST);
        params.distinguished_name = name;
        let cert = params
            .signed_by(&server_key, &issuer)
            .context("signing the server certificate")?;
        let ca_file = dir.join("ca.pem");
        let wrong_ca_file = dir.join("wrong-ca.pem");
        std::fs::write(&ca_file, ca_pem)?;
        std::fs::write(&wrong_ca_file, wrong_pem)?;
        Ok(Self {
            ca_file,
            wrong_ca_file,
            cert_pem: cert.pem(),
            key_pem: server_key.serialize_pem(),
            dir,
        })
    }

    /// Writes the CA, the server certificate and its key into `dir`;
    /// returns their paths (CA, certificate, key).
    fn install(&self, dir: &Path) -> Result<(PathBuf, PathBuf, PathBuf)> {
        let paths = (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key"));
        std::fs::copy(&self.ca_file, &paths.0)?;
        std::fs::write(&paths.1, &self.cert_pem)?;
        std::fs::write(&paths.2, &self.key_pem)?;
        Ok(paths)
    }
}

impl Drop for TestCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn new_ca(name: &str) -> Result<(CertificateParams, KeyPair, String)> {
    let key = KeyPair::generate().context("generating a CA key")?;
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    let cert = params.self_signed(&key).context("signing a CA")?;
    Ok((params, key, cert.pem()))
}
