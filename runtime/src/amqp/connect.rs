//! Opens one AMQP connection: plain text for `amqp://`, TLS for `amqps://`
//! with the broker's certificate checked — chain and host name — against
//! the system roots plus `CLARION_EXTRA_CA_FILE` (lapin's rustls support).

use std::time::Duration;

use lapin::tcp::OwnedTLSConfig;
use lapin::uri::AMQPUri;
use lapin::{Connection, ConnectionProperties};
use tracing::debug;

use crate::tls::{LinkError, TlsFailure, Trust};

/// Connects to `url` with `properties`, trusting what `trust` trusts.
pub async fn open(
    url: &str,
    properties: ConnectionProperties,
    trust: &Trust,
) -> Result<Connection, lapin::Error> {
    let tls = OwnedTLSConfig {
        identity: None,
        cert_chain: trust.extra_ca_pem().map(str::to_owned),
    };
    let runtime = lapin::runtime::default_runtime()?;
    Connection::connect_with_config(url, properties, tls, runtime).await
}

/// True for an `amqps://` URL.
pub fn is_tls(url: &str) -> bool {
    url.get(..8)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("amqps://"))
}

/// `host:port` of `url`, for messages (never the credentials).
pub fn host(url: &str) -> String {
    match url.parse::<AMQPUri>() {
        Ok(uri) => format!("{}:{}", uri.authority.host, uri.authority.port),
        Err(_) => "an unparsable URL".to_owned(),
    }
}

/// The start-up error for `error` when it is a TLS failure; `None` for
/// everything else (a broker that is away is waited for, not refused).
pub fn tls_failure(url: &str, error: &lapin::Error) -> Option<LinkError> {
    TlsFailure::find(error).map(|failure| LinkError {
        link: "RabbitMQ",
        host: host(url),
        failure,
    })
}

/// One connection attempt, at start-up, for an `amqps://` URL: a failed
/// handshake (unknown CA, wrong name, not a TLS port) is an error; a broker
/// that is away or slow is not (the link keeps trying in the background).
pub async fn check_tls(url: &str, trust: &Trust, timeout: Duration) -> Result<(), LinkError> {
    if !is_tls(url) {
        return Ok(());
    }
    let properties = ConnectionProperties::default().with_connection_name("clarion-tls-check".into());
    match tokio::time::timeout(timeout, open(url, properties, trust)).await {
        Ok(Ok(connection)) => {
            let _ = connection.close(200, "tls checked".into()).await;
            Ok(())
        }
        Ok(Err(error)) => match tls_failure(url, &error) {
            Some(failure) => Err(failure),
            None => {
                debug!(error = %error, "rabbitmq not reachable for the TLS check");
                Ok(())
            }
        },
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_decides_tls_and_the_host_leaves_out_the_password() {
        assert!(is_tls("amqps://u:secret@mq.example:5671/%2f"));
        assert!(!is_tls("amqp://u:secret@mq.example:5672/%2f"));
        assert_eq!(host("amqps://u:secret@mq.example:5671/%2f"), "mq.example:5671");
    }

    #[tokio::test]
    async fn a_plain_text_port_is_refused_as_not_supporting_tls() {
        let trust = Trust::load(&crate::settings::TlsSettings::default()).unwrap();
        let plain = std::env::var("CLARION_TEST_AMQP_URL")
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
        let url = plain.replacen("amqp://", "amqps://", 1);
        let error = check_tls(&url, &trust, Duration::from_secs(20))
            .await
            .unwrap_err();
        assert_eq!(error.failure, TlsFailure::NotSupported, "{error}");
    }
}
