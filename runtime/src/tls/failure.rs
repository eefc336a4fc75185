//! Why a TLS handshake failed, in words an operator can act on, and the
//! start-up error that names the link and the host.

use std::error::Error;
use std::fmt;

use rustls::CertificateError;

/// What went wrong in a TLS handshake with a server of ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsFailure {
    /// The certificate does not chain to a trusted root.
    UnknownCa,
    /// The certificate is good but issued for other names.
    NameMismatch,
    /// The certificate has expired or is not valid yet.
    OutOfDate,
    /// The server refused TLS or did not answer in TLS.
    NotSupported,
    /// Any other certificate or handshake problem, as rustls words it.
    Other(String),
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownCa => f.write_str(
                "unknown CA: the server's certificate is not signed by a trusted CA (add that CA to CLARION_EXTRA_CA_FILE)",
            ),
            Self::NameMismatch => f.write_str(
                "hostname mismatch: the server's certificate is not issued for this host name (connect by a name the certificate lists)",
            ),
            Self::OutOfDate => f.write_str("the server's certificate has expired or is not valid yet"),
            Self::NotSupported => {
                f.write_str("the server does not support SSL/TLS (TLS is off there, or this is not a TLS port)")
            }
            Self::Other(reason) => write!(f, "TLS handshake failed: {reason}"),
        }
    }
}

impl TlsFailure {
    /// The TLS failure somewhere in `error`'s chain of causes, if any.
    /// Errors that are not about TLS (refused, timed out) give `None`.
    pub fn find(error: &(dyn Error + 'static)) -> Option<Self> {
        let mut current = Some(error);
        while let Some(error) = current {
            if let Some(failure) = Self::from_one(error) {
                return Some(failure);
            }
            // `io::Error::source` skips the error it wraps: step into it.
            current = match error.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
                Some(wrapped) => Some(wrapped as &(dyn Error + 'static)),
                None => error.source(),
            };
        }
        None
    }

    fn from_one(error: &(dyn Error + 'static)) -> Option<Self> {
        if let Some(rustls) = error.downcast_ref::<rustls::Error>() {
            return Some(Self::from_rustls(rustls));
        }
        // tokio-postgres' words when the server answers "no" to SSLRequest.
        if error.to_string() == "server does not support TLS" {
            return Some(Self::NotSupported);
        }
        None
    }

    fn from_rustls(error: &rustls::Error) -> Self {
        match error {
            rustls::Error::InvalidCertificate(certificate) => match certificate {
                CertificateError::UnknownIssuer => Self::UnknownCa,
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                    Self::NameMismatch
                }
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. } => Self::OutOfDate,
                other => Self::Other(format!("{other:?}")),
            },
            // Bytes that are not TLS records: a plain-text server.
            rustls::Error::InvalidMessage(_) => Self::NotSupported,
            other => Self::Other(other.to_string()),
        }
    }
}

/// A link that could not be set up securely: refuses the start.
#[derive(Debug, Clone, thiserror::Error)]
#[error("TLS link to {link} at {host} failed: {failure}")]
pub struct LinkError {
    /// `PostgreSQL` or `RabbitMQ`.
    pub link: &'static str,
    /// The host (and port) connected to.
    pub host: String,
    pub failure: TlsFailure,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rustls_error_wrapped_in_io_errors_is_found_and_named() {
        let rustls = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, rustls);
        let outer = std::io::Error::other(io);
        assert_eq!(TlsFailure::find(&outer), Some(TlsFailure::UnknownCa));
        let name = rustls::Error::InvalidCertificate(CertificateError::NotValidForName);
        assert_eq!(TlsFailure::find(&name), Some(TlsFailure::NameMismatch));
    }

    #[test]
    fn errors_that_are_not_about_tls_are_not_tls_failures() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(TlsFailure::find(&refused), None);
    }

    #[test]
    fn the_start_up_error_names_the_link_the_host_and_the_cause() {
        let error = LinkError {
            link: "PostgreSQL",
            host: "db.example:5432".into(),
            failure: TlsFailure::UnknownCa,
        };
        let text = error.to_string();
        assert!(text.contains("PostgreSQL at db.example:5432"), "{text}");
        assert!(text.contains("unknown CA"), "{text}");
    }
}
