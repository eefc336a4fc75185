//! Opens one AMQP connection: plain text for `amqp://`, TLS for `amqps://`
//! with the broker's certificate checked — chain and host name — against
//! the system roots plus `CLARION_EXTRA_CA_FILE` (lapin's rustls support).
//!
//! The one place Clarion reaches the broker: `CLARION_AMQP_URL` holds one
//! URL (a single node, or the operator's load balancer) or several,
//! comma-separated (the nodes of a cluster); a connection goes to the
//! first that answers, each attempt within [`ATTEMPT_TIMEOUT`].

use std::io;
use std::time::Duration;

use lapin::tcp::OwnedTLSConfig;
use lapin::uri::AMQPUri;
use lapin::{Connection, ConnectionProperties};
use tracing::debug;

use crate::tls::{LinkError, TlsFailure, Trust};

/// How long one node gets to take a connection (TCP, TLS, AMQP handshake):
/// a node that vanished without a word must not hold the link, while the
/// other nodes of the list answer.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// The URLs of a `CLARION_AMQP_URL`: comma-separated, blanks ignored (a
/// comma inside a password is written `%2C`).
pub fn endpoints(list: &str) -> Vec<String> {
    let urls: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(str::to_owned)
        .collect();
    if urls.is_empty() {
        vec![list.to_owned()]
    } else {
        urls
    }
}

/// Connects to the first node of `urls` (one URL or a comma-separated list)
/// that answers, with `properties`, trusting what `trust` trusts.
pub async fn open(
    urls: &str,
    properties: ConnectionProperties,
    trust: &Trust,
) -> Result<Connection, lapin::Error> {
    open_any(&endpoints(urls), 0, properties, trust)
        .await
        .map(|(_, connection)| connection)
        .map_err(|failed| failed.error)
}

/// The last node of a list that did not answer, and why.
#[derive(Debug)]
pub struct Unreached {
    pub index: usize,
    pub error: lapin::Error,
}

/// Tries each of `urls` once, starting at `start` and going round; the
/// index of the node that answered and its connection, or the last failure.
pub async fn open_any(
    urls: &[String],
    start: usize,
    properties: ConnectionProperties,
    trust: &Trust,
) -> Result<(usize, Connection), Unreached> {
    let mut last = None;
    for offset in 0..urls.len() {
        let index = (start + offset) % urls.len();
        match open_one(&urls[index], properties.clone(), trust).await {
            Ok(connection) => return Ok((index, connection)),
            Err(error) => {
                if urls.len() > 1 {
                    debug!(node = %host(&urls[index]), error = %error, "rabbitmq node did not answer");
                }
                last = Some(Unreached { index, error });
            }
        }
    }
    Err(last.unwrap_or_else(|| Unreached {
        index: 0,
        error: io::Error::new(io::ErrorKind::InvalidInput, "no broker URL").into(),
    }))
}

/// Connects to one node, within [`ATTEMPT_TIMEOUT`].
async fn open_one(
    url: &str,
    properties: ConnectionProperties,
    trust: &Trust,
) -> Result<Connection, lapin::Error> {
    let tls = OwnedTLSConfig {
        identity: None,
        cert_chain: trust.extra_ca_pem().map(str::to_owned),
    };
    let runtime = lapin::runtime::default_runtime()?;
    let connecting = Connection::connect_with_config(url, properties, tls, runtime);
    match tokio::time::timeout(ATTEMPT_TIMEOUT, connecting).await {
        Ok(answer) => answer,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer within {ATTEMPT_TIMEOUT:?}"),
        )
        .into()),
    }
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

/// One connection attempt, at start-up, to each `amqps://` node of `urls`
/// (one URL or a comma-separated list): a failed handshake (unknown CA,
/// wrong name, not a TLS port) is an error; a node that is away or slow is
/// not (the link keeps trying in the background).
pub async fn check_tls(urls: &str, trust: &Trust, timeout: Duration) -> Result<(), LinkError> {
    for url in endpoints(urls) {
        check_tls_one(&url, trust, timeout).await?;
    }
    Ok(())
}

async fn check_tls_one(url: &str, trust: &Trust, timeout: Duration) -> Result<(), LinkError> {
    if !is_tls(url) {
        return Ok(());
    }
    let properties = ConnectionProperties::default().with_connection_name("clarion-tls-check".into());
    match tokio::time::timeout(timeout, open_one(url, properties, trust)).await {
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

    #[test]
    fn a_list_of_nodes_is_split_on_commas_and_one_url_stays_whole() {
        assert_eq!(
            endpoints("amqp://u:p@a:5672/%2f, amqp://u:p@b:5672/%2f,"),
            ["amqp://u:p@a:5672/%2f", "amqp://u:p@b:5672/%2f"]
        );
        assert_eq!(endpoints("amqp://u:p@a:5672/%2f"), ["amqp://u:p@a:5672/%2f"]);
    }

    #[tokio::test]
    async fn the_first_node_that_answers_takes_the_connection() {
        let trust = Trust::load(&crate::settings::TlsSettings::default()).unwrap();
        let up = std::env::var("CLARION_TEST_AMQP_URL")
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
        // Nothing listens on port 1: a node that is down.
        let urls = endpoints(&format!("amqp://guest:guest@127.0.0.1:1/%2f,{up}"));
        let (index, connection) = open_any(&urls, 0, ConnectionProperties::default(), &trust)
            .await
            .expect("the second node answers");
        assert_eq!(index, 1);
        let _ = connection.close(200, "done".into()).await;
        let failed = open_any(&urls[..1], 0, ConnectionProperties::default(), &trust)
            .await
            .unwrap_err();
        assert_eq!(failed.index, 0);
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
