//! Helpers shared by the mock tests.

use std::path::Path;
use std::sync::Arc;

use clarion_load_tests::mocks::{FaultConfig, Stats};
use rustls::RootCertStore;
use rustls_pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// A client trusting only the mock's CA; HTTP/1.1 only when `http1_only`.
pub fn client(ca_file: &Path, http1_only: bool) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(ca_file).unwrap()).unwrap();
    let builder = reqwest::Client::builder().tls_certs_only([ca]);
    let builder = if http1_only { builder.http1_only() } else { builder };
    builder.build().unwrap()
}

/// Replaces a mock's fault settings through its control API.
pub async fn set_faults(client: &reqwest::Client, control: &str, faults: &FaultConfig) {
    let response = client
        .put(format!("{control}/faults"))
        .json(faults)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::NO_CONTENT);
}

/// A mock's counters, read through its control API.
pub async fn stats(client: &reqwest::Client, control: &str) -> Stats {
    client
        .get(format!("{control}/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// SETTINGS_MAX_CONCURRENT_STREAMS the server at `endpoint` advertises.
/// An HTTP/2 connection to a mock over TLS offering exactly `alpn` (none
/// at all for a client that speaks HTTP/2 by prior knowledge).
pub async fn h2_connect(
    endpoint: &str,
    ca_file: &Path,
    alpn: &[&[u8]],
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    h2::client::Connection<tokio_rustls::client::TlsStream<TcpStream>, bytes::Bytes>,
) {
    clarion_load_tests::mocks::tls::install_crypto_provider();
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let addr = endpoint.trim_start_matches("https://");
    let tcp = TcpStream::connect(addr).await.unwrap();
    let tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    h2::client::handshake(tls).await.unwrap()
}

/// Sends one request over a fresh prior-knowledge connection (no ALPN) and
/// returns the answer's status and body.
pub async fn send_without_alpn(
    endpoint: &str,
    ca_file: &Path,
    request: http::Request<()>,
    body: bytes::Bytes,
) -> (http::StatusCode, bytes::Bytes) {
    let (client, connection) = h2_connect(endpoint, ca_file, &[]).await;
    tokio::spawn(connection);
    let mut client = client.ready().await.expect("the connection is ready");
    let (response, mut stream) = client.send_request(request, false).expect("a stream");
    stream.send_data(body, true).expect("the body is sent");
    let response = response.await.expect("an answer");
    let status = response.status();
    let mut received = response.into_body();
    let mut body = Vec::new();
    while let Some(chunk) = received.data().await {
        let chunk = chunk.expect("a body chunk");
        let _ = received.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    (status, body.into())
}

pub async fn max_concurrent_streams(endpoint: &str, ca_file: &Path) -> usize {
    let (client, mut connection) = h2_connect(endpoint, ca_file, &[b"h2"]).await;
    // SETTINGS arrive with the server's first frames: drive the connection
    // through one request and then read what it learned.
    let mut request = tokio::spawn(async move {
        let mut client = client.ready().await?;
        let request = http::Request::builder()
            .method("GET")
            .uri(format!("{}/", "https://localhost"))
            .body(())
            .expect("a request");
        let (response, _) = client.send_request(request, true)?;
        response.await.map(|_| ())
    });
    tokio::select! {
        _ = &mut connection => {}
        _ = &mut request => {}
    }
    connection.max_concurrent_send_streams()
}
