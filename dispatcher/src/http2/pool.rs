//! A pool of persistent HTTP/2 connections to one origin.
//!
//! Requests are spread round-robin over the connections; on each, as many
//! streams run at once as the server allows (h2 waits for a free stream when
//! the server's `SETTINGS_MAX_CONCURRENT_STREAMS` is reached). A connection
//! that breaks (GOAWAY, I/O error) is replaced on next use; callers see a
//! [`TransportError`] and may retry.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use http::uri::{Authority, Scheme};
use http::{HeaderMap, Request, StatusCode, Uri};
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tracing::{debug, info};

use super::coalesce::Coalesced;

/// Flow-control windows: large enough that small pushes never wait on them.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;

/// How many connections, streams and how long to wait.
#[derive(Debug, Clone, Copy)]
pub struct PoolLimits {
    pub connections: usize,
    pub streams_per_connection: usize,
    pub timeout: Duration,
}

/// An answer, body read in full.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Why a request got no answer. Every kind is worth retrying.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    #[error("cannot connect to {origin}: {reason}")]
    Connect { origin: String, reason: String },
    #[error("connection lost: {0}")]
    Connection(String),
    #[error("stream failed: {0}")]
    Stream(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

impl TransportError {
    /// Fixed label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            TransportError::Connect { .. } => "connect",
            TransportError::Connection(_) => "connection",
            TransportError::Stream(_) => "stream",
            TransportError::Timeout(_) => "timeout",
        }
    }
}

struct Connection {
    sender: SendRequest<Bytes>,
    closed: Arc<AtomicBool>,
    /// Client-side cap on concurrent streams (the server's own limit applies too).
    streams: Arc<tokio::sync::Semaphore>,
}

impl Connection {
    fn usable(&self) -> bool {
        !self.closed.load(Ordering::Relaxed)
    }
}

struct Slot {
    current: ArcSwapOption<Connection>,
    /// Held while (re)connecting, so one caller connects and the others wait.
    connecting: tokio::sync::Mutex<()>,
}

pub struct Http2Pool {
    origin: String,
    host: String,
    port: u16,
    scheme: Scheme,
    authority: Authority,
    server_name: ServerName<'static>,
    connector: TlsConnector,
    slots: Box<[Slot]>,
    next: AtomicUsize,
    timeout: Duration,
    max_streams: usize,
    opened: AtomicU64,
    /// `clarion_dispatcher_http2_streams_in_flight{origin}`.
    in_flight: metrics::Gauge,
    /// `clarion_dispatcher_http2_connections_opened_total{origin}`.
    opened_total: metrics::Counter,
}

impl Http2Pool {
    /// A pool of `connections` to the origin of `base_url` (https only);
    /// nothing is connected until the first request.
    pub fn new(base_url: &str, tls: Arc<ClientConfig>, limits: PoolLimits) -> Result<Self, String> {
        let url = url::Url::parse(base_url).map_err(|err| format!("invalid URL {base_url:?}: {err}"))?;
        if url.scheme() != "https" {
            return Err(format!("{base_url:?} is not an https URL"));
        }
        let host = url
            .host_str()
            .ok_or_else(|| format!("{base_url:?} names no host"))?
            .to_owned();
        let port = url.port_or_known_default().unwrap_or(443);
        let authority: Authority = format!("{host}:{port}")
            .parse()
            .map_err(|err| format!("invalid authority in {base_url:?}: {err}"))?;
        let server_name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned())
            .map_err(|err| format!("invalid server name in {base_url:?}: {err}"))?;
        let origin = format!("{host}:{port}");
        Ok(Self {
            in_flight: metrics::gauge!("clarion_dispatcher_http2_streams_in_flight", "origin" => origin.clone()),
            opened_total: metrics::counter!("clarion_dispatcher_http2_connections_opened_total", "origin" => origin.clone()),
            origin,
            host,
            port,
            scheme: Scheme::HTTPS,
            authority,
            server_name,
            connector: TlsConnector::from(tls),
            slots: (0..limits.connections.max(1))
                .map(|_| Slot {
                    current: ArcSwapOption::empty(),
                    connecting: tokio::sync::Mutex::new(()),
                })
                .collect(),
            next: AtomicUsize::new(0),
            timeout: limits.timeout,
            max_streams: limits.streams_per_connection.max(1),
            opened: AtomicU64::new(0),
        })
    }

    /// The absolute URI of `path_and_query` on this origin.
    pub fn uri(&self, path_and_query: &str) -> Result<Uri, http::Error> {
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build()
    }

    /// Connections opened so far (reconnects included).
    pub fn connections_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Sends one request and reads the whole answer, within the timeout.
    pub async fn send(&self, request: Request<()>, body: Bytes) -> Result<Response, TransportError> {
        self.in_flight.increment(1.0);
        let result = match tokio::time::timeout(self.timeout, self.exchange(request, body)).await {
            Ok(result) => result,
            Err(_) => Err(TransportError::Timeout(self.timeout)),
        };
        self.in_flight.decrement(1.0);
        result
    }

    async fn exchange(&self, request: Request<()>, body: Bytes) -> Result<Response, TransportError> {
        let connection = self.connection().await?;
        let _stream = connection
            .streams
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| TransportError::Connection("connection closed".into()))?;
        let broken = |err: h2::Error| {
            if err.is_go_away() || err.is_io() || err.reason().is_none() {
                connection.closed.store(true, Ordering::Relaxed);
                TransportError::Connection(err.to_string())
            } else {
                TransportError::Stream(err.to_string())
            }
        };
        let mut sender = connection.sender.clone().ready().await.map_err(broken)?;
        let end_of_stream = body.is_empty();
        let (response, mut stream) = sender.send_request(request, end_of_stream).map_err(broken)?;
        if !end_of_stream {
            stream.send_data(body, true).map_err(broken)?;
        }
        let response = response.await.map_err(broken)?;
        let (parts, mut received) = response.into_parts();
        let mut data = BytesMut::new();
        while let Some(chunk) = received.data().await {
            let chunk = chunk.map_err(broken)?;
            let _ = received.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        Ok(Response {
            status: parts.status,
            headers: parts.headers,
            body: data.freeze(),
        })
    }

    /// The next connection round-robin, (re)connected if needed.
    async fn connection(&self) -> Result<Arc<Connection>, TransportError> {
        let slot = &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len()];
        if let Some(connection) = slot.current.load_full().filter(|c| c.usable()) {
            return Ok(connection);
        }
        let _connecting = slot.connecting.lock().await;
        if let Some(connection) = slot.current.load_full().filter(|c| c.usable()) {
            return Ok(connection);
        }
        let connection = Arc::new(self.connect().await?);
        slot.current.store(Some(connection.clone()));
        Ok(connection)
    }

    async fn connect(&self) -> Result<Connection, TransportError> {
        let fail = |reason: String| TransportError::Connect {
            origin: self.origin.clone(),
            reason,
        };
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|err| fail(err.to_string()))?;
        let _ = tcp.set_nodelay(true);
        let tls = self
            .connector
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|err| fail(format!("TLS: {err}")))?;
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err(fail("the server did not agree to HTTP/2".into()));
        }
        let (sender, driver) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake::<_, Bytes>(Coalesced(tls))
            .await
            .map_err(|err| fail(format!("HTTP/2 handshake: {err}")))?;
        let closed = Arc::new(AtomicBool::new(false));
        let flag = closed.clone();
        let origin = self.origin.clone();
        tokio::spawn(async move {
            if let Err(err) = driver.await {
                debug!(%origin, error = %err, "HTTP/2 connection ended");
            }
            flag.store(true, Ordering::Relaxed);
        });
        let opened = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
        self.opened_total.increment(1);
        info!(origin = %self.origin, connections_opened = opened, "HTTP/2 connection open");
        Ok(Connection {
            sender,
            closed,
            streams: Arc::new(tokio::sync::Semaphore::new(self.max_streams)),
        })
    }
}
