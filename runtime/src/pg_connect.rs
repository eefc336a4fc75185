//! How a PostgreSQL connection is opened: in plain text or over TLS, as the
//! URL's `sslmode` asks, with libpq's meanings:
//! - `disable`, `prefer` (the default): plain text, as Clarion always did
//!   (no opportunistic encryption);
//! - `require`: encrypted, the certificate is not checked (safe from
//!   eavesdroppers, not from a machine in the middle);
//! - `verify-ca`: encrypted, the certificate chains to a trusted root;
//! - `verify-full`: as `verify-ca`, and issued for the host connected to.
//!
//! Trusted roots: the system's store plus `CLARION_EXTRA_CA_FILE`.
//! tokio-postgres knows only `disable`/`prefer`/`require`, so the mode is
//! taken out of the URL here and enforced by the rustls configuration.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::config::{Host, SslMode as WireSslMode};
use tokio_postgres::{AsyncMessage, Client, Config, Notification};
use tokio_postgres_rustls::MakeRustlsConnect;
use tracing::debug;

use crate::tls::{LinkError, TlsFailure, Trust, Verification};

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    Disable,
    #[default]
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "disable" => Self::Disable,
            "prefer" | "allow" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => return None,
        })
    }

    /// How the certificate is checked; `None` for plain text.
    fn verification(self) -> Option<Verification> {
        match self {
            Self::Disable | Self::Prefer => None,
            Self::Require => Some(Verification::Nothing),
            Self::VerifyCa => Some(Verification::ChainOnly),
            Self::VerifyFull => Some(Verification::Full),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("invalid database URL: {0}")]
    Url(#[source] tokio_postgres::Error),
    #[error("invalid sslmode `{0}` in the database URL (disable, prefer, require, verify-ca or verify-full)")]
    SslMode(String),
}

/// A PostgreSQL server and how to reach it.
#[derive(Clone)]
pub struct PgTarget {
    config: Config,
    mode: SslMode,
    tls: MakeRustlsConnect,
}

impl PgTarget {
    /// The target `url` describes (a URL or libpq's `key=value` form).
    pub fn new(url: &str, trust: &Trust) -> Result<Self, TargetError> {
        let (rest, mode) = take_sslmode(url)?;
        let mut config: Config = rest.parse().map_err(TargetError::Url)?;
        let verification = mode.verification();
        config.ssl_mode(match verification {
            Some(_) => WireSslMode::Require,
            None => WireSslMode::Disable,
        });
        let client_config = trust.client_config(verification.unwrap_or(Verification::Full));
        Ok(Self {
            config,
            mode,
            tls: MakeRustlsConnect::new((*client_config).clone()),
        })
    }

    pub fn config_mut(&mut self) -> &mut Config {
        &mut self.config
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn ssl_mode(&self) -> SslMode {
        self.mode
    }

    /// Opens a session; its connection is driven by a task of its own,
    /// which ends when the client is dropped.
    pub async fn connect(&self) -> Result<(Client, JoinHandle<()>), tokio_postgres::Error> {
        let (client, connection) = self.config.connect(self.tls.clone()).await?;
        let driver = tokio::spawn(async move {
            if let Err(err) = connection.await {
                debug!(error = %err, "database connection ended");
            }
        });
        Ok((client, driver))
    }

    /// Opens a session whose notifications (`LISTEN`) are handed to the
    /// returned receiver, at most `capacity` waiting (then the connection
    /// is read no further until they are taken). The receiver ends when the
    /// connection does.
    pub async fn connect_listening(
        &self,
        capacity: usize,
    ) -> Result<(Client, mpsc::Receiver<Notification>), tokio_postgres::Error> {
        let (client, mut connection) = self.config.connect(self.tls.clone()).await?;
        let (notifications, received) = mpsc::channel(capacity);
        tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(notification)) => {
                        if notifications.send(notification).await.is_err() {
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(err) => {
                        debug!(error = %err, "listening database connection ended");
                        break;
                    }
                }
            }
        });
        Ok((client, received))
    }

    /// `host:port` of the first server, for messages.
    pub fn host(&self) -> String {
        let host = match self.config.get_hosts().first() {
            Some(Host::Tcp(name)) => name.clone(),
            Some(Host::Unix(path)) => path.display().to_string(),
            None => "localhost".to_owned(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        format!("{host}:{port}")
    }

    /// The start-up error for `error` when it is a TLS failure; `None` for
    /// everything else (a server that is away is waited for, not refused).
    pub fn tls_failure(&self, error: &tokio_postgres::Error) -> Option<LinkError> {
        TlsFailure::find(error).map(|failure| LinkError {
            link: "PostgreSQL",
            host: self.host(),
            failure,
        })
    }

    /// One connection attempt, at start-up, when the URL asks for TLS: a
    /// failed handshake (unknown CA, wrong name, no TLS on the server) is an
    /// error; a server that is away is not (the pool keeps trying).
    pub async fn check_tls(&self, timeout: Duration) -> Result<(), LinkError> {
        if self.mode.verification().is_none() {
            return Ok(());
        }
        match tokio::time::timeout(timeout, self.connect()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => match self.tls_failure(&error) {
                Some(failure) => Err(failure),
                None => {
                    debug!(error = %error, "database not reachable for the TLS check");
                    Ok(())
                }
            },
            Err(_) => Ok(()),
        }
    }
}

/// `url` without its `sslmode`, and that mode (`prefer` when absent).
fn take_sslmode(url: &str) -> Result<(String, SslMode), TargetError> {
    let mut mode = SslMode::default();
    let mut take = |pair: &str| -> Result<bool, TargetError> {
        match pair.split_once('=') {
            Some((key, value)) if key.trim() == "sslmode" => {
                let value = value.trim();
                mode = SslMode::parse(value).ok_or_else(|| TargetError::SslMode(value.to_owned()))?;
                Ok(true)
            }
            _ => Ok(false),
        }
    };
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let rest = if is_url {
        match url.split_once('?') {
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&') {
                    if !take(pair)? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
            None => url.to_owned(),
        }
    } else {
        let mut kept = Vec::new();
        for word in url.split_whitespace() {
            if !take(word)? {
                kept.push(word);
            }
        }
        kept.join(" ")
    };
    Ok((rest, mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_is_taken_out_of_a_url_and_the_other_options_stay() {
        let (rest, mode) =
            take_sslmode("postgres://u:p@db:5432/x?sslmode=verify-full&application_name=a").unwrap();
        assert_eq!(mode, SslMode::VerifyFull);
        assert_eq!(rest, "postgres://u:p@db:5432/x?application_name=a");
        let (rest, mode) = take_sslmode("postgresql://db/x?sslmode=verify-ca").unwrap();
        assert_eq!((rest.as_str(), mode), ("postgresql://db/x", SslMode::VerifyCa));
        let (rest, mode) = take_sslmode("postgres://db/x").unwrap();
        assert_eq!((rest.as_str(), mode), ("postgres://db/x", SslMode::Prefer));
    }

    #[test]
    fn the_mode_is_taken_out_of_the_key_value_form() {
        let (rest, mode) = take_sslmode("host=db user=u sslmode=require dbname=x").unwrap();
        assert_eq!(mode, SslMode::Require);
        assert_eq!(rest, "host=db user=u dbname=x");
    }

    #[test]
    fn an_unknown_mode_is_refused() {
        let error = take_sslmode("postgres://db/x?sslmode=verify-everything").unwrap_err();
        assert!(error.to_string().contains("verify-everything"), "{error}");
    }

    #[tokio::test]
    async fn a_server_that_answers_no_to_tls_is_refused_as_not_supporting_it() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // Answers PostgreSQL's SSLRequest with 'N', as `ssl = off` does.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            if let Ok((mut socket, _)) = listener.accept().await {
                let mut request = [0u8; 8];
                if socket.read_exact(&mut request).await.is_ok() {
                    let _ = socket.write_all(b"N").await;
                }
            }
        });
        let trust = Trust::load(&crate::settings::TlsSettings::default()).unwrap();
        let url = format!("postgres://u@127.0.0.1:{}/x?sslmode=require", addr.port());
        let target = PgTarget::new(&url, &trust).unwrap();
        let error = target.check_tls(Duration::from_secs(10)).await.unwrap_err();
        assert_eq!(error.failure, TlsFailure::NotSupported, "{error}");
        assert!(
            error.to_string().contains(&format!("127.0.0.1:{}", addr.port())),
            "{error}"
        );
    }
}
