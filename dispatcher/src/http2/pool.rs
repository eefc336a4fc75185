//! A pool of persistent HTTP/2 connections to one origin.
//!
//! Requests are spread round-robin over the connections; on each, as many
//! streams run at once as the server allows (h2 waits for a free stream when
//! the server's `SETTINGS_MAX_CONCURRENT_STREAMS` is reached). A connection
//! leaves the rotation ("retired") and is replaced on next use when:
//! - the server sends GOAWAY: it takes no new stream, but the streams it
//!   already carries finish (it drains); a request that finds it going away
//!   before its stream was opened goes to a fresh connection at once, and
//!   so does one whose stream the server says it never processed (a GOAWAY
//!   with NO_ERROR whose last stream id is below it, or REFUSED_STREAM:
//!   RFC 9113 §8.7, safe to send again), at most `REROUTES` times; the
//!   request is built again for that (h2 consumes it), so callers give a
//!   function that builds it;
//! - it breaks (I/O error, the server closed it);
//! - it is dead though still open, as a black-holed route looks: it misses
//!   the answer to a PING (one every `ping_interval`, answered within
//!   `ping_timeout`), or `timeouts_in_a_row` requests sent on it time out
//!   with no answer in between. A dead connection is closed at once, so the
//!   streams it still carries fail now instead of each at its own deadline.
//!
//! Every request has one deadline (`timeout`) covering everything: waiting
//! for a connection (TCP connect, TLS and HTTP/2 handshakes included), for a
//! free stream, and for the whole answer. Callers see a [`TransportError`]
//! and may retry.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bytes::{Bytes, BytesMut};
use h2::Reason;
use h2::client::SendRequest;
use h2::{Ping, PingPong};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Request, StatusCode, Uri};
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::task::AbortHandle;
use tokio_rustls::TlsConnector;
use tracing::{debug, info, warn};

use super::coalesce::Coalesced;
use crate::metrics;

/// Flow-control windows: large enough that small pushes never wait on them.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;
/// Times one request moves on to another connection because the one it was
/// given went away before the request could leave, or before the server
/// processed it: each move opens a fresh connection, so two are plenty.
const REROUTES: u32 = 2;

/// How many connections, streams and how long to wait.
#[derive(Debug, Clone, Copy)]
pub struct PoolLimits {
    pub connections: usize,
    pub streams_per_connection: usize,
    /// The whole of one request, connecting included.
    pub timeout: Duration,
    pub liveness: Liveness,
}

/// How a connection that is open but dead is found out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// A PING is sent this long after the previous answer.
    pub ping_interval: Duration,
    /// A PING unanswered this long retires the connection.
    pub ping_timeout: Duration,
    /// Requests sent on a connection that time out in a row, no answer in
    /// between, that retire it.
    pub timeouts_in_a_row: u32,
}

impl Default for Liveness {
    fn default() -> Self {
        Self {
            ping_interval: Duration::from_secs(30),
            ping_timeout: Duration::from_secs(10),
            timeouts_in_a_row: 3,
        }
    }
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

/// Why a pool cannot be built for a base URL (a setting's mistake).
#[derive(Debug, Clone, thiserror::Error)]
pub enum PoolError {
    #[error("invalid URL {url:?}: {source}")]
    Url { url: String, source: url::ParseError },
    #[error("{0:?} is not an https URL")]
    NotHttps(String),
    #[error("{0:?} names no host")]
    NoHost(String),
    #[error("invalid authority in {url:?}: {reason}")]
    Authority { url: String, reason: String },
    #[error("invalid server name in {url:?}: {reason}")]
    ServerName { url: String, reason: String },
}

struct Connection {
    sender: SendRequest<Bytes>,
    /// Takes no new stream: it went away, broke or was found dead. Set by
    /// the connection's task when it ends, too.
    retired: Arc<AtomicBool>,
    /// The connection's task (h2's driver and the PINGs); aborting it
    /// closes the connection and fails its streams at once.
    task: AbortHandle,
    /// Requests sent on it that timed out since its last answer.
    timeouts: AtomicU32,
    /// Client-side cap on concurrent streams (the server's own limit applies too).
    streams: Arc<tokio::sync::Semaphore>,
    /// Its rank among the pool's connections, for logs.
    number: u64,
}

impl Connection {
    fn usable(&self) -> bool {
        !self.retired.load(Ordering::Relaxed)
    }

    /// Leaves the rotation; true for the caller that retired it.
    fn retire(&self) -> bool {
        !self.retired.swap(true, Ordering::Relaxed)
    }

    fn answered(&self) {
        if self.timeouts.load(Ordering::Relaxed) != 0 {
            self.timeouts.store(0, Ordering::Relaxed);
        }
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
    liveness: Liveness,
    max_streams: usize,
    opened: AtomicU64,
    /// [`metrics::STREAMS_IN_FLIGHT`].
    in_flight: metrics::Gauge,
    /// [`metrics::CONNECTIONS_OPENED`].
    opened_total: metrics::Counter,
    /// [`metrics::CONNECTIONS_RETIRED`].
    retired_total: Retirements,
}

/// Why connections left the rotation (a fixed label each).
struct Retirements {
    went_away: metrics::Counter,
    broken: metrics::Counter,
    timeouts: metrics::Counter,
}

impl Retirements {
    fn new(origin: &str) -> Self {
        let counter = |reason: &'static str| metrics::connections_retired(origin, reason);
        Self {
            went_away: counter("goaway"),
            broken: counter("broken"),
            timeouts: counter("timeouts"),
        }
    }
}

/// [`metrics::CONNECTIONS_RETIRED`] with reason `ping`,
/// counted by the connection's own task.
fn ping_retirements(origin: &str) -> metrics::Counter {
    metrics::connections_retired(origin, "ping")
}

impl Http2Pool {
    /// A pool of `connections` to the origin of `base_url` (https only);
    /// nothing is connected until the first request.
    pub fn new(base_url: &str, tls: Arc<ClientConfig>, limits: PoolLimits) -> Result<Self, PoolError> {
        let url = url::Url::parse(base_url).map_err(|source| PoolError::Url {
            url: base_url.to_owned(),
            source,
        })?;
        if url.scheme() != "https" {
            return Err(PoolError::NotHttps(base_url.to_owned()));
        }
        let host = url
            .host_str()
            .ok_or_else(|| PoolError::NoHost(base_url.to_owned()))?
            .to_owned();
        let port = url.port_or_known_default().unwrap_or(443);
        let authority: Authority =
            format!("{host}:{port}")
                .parse()
                .map_err(|err: http::uri::InvalidUri| PoolError::Authority {
                    url: base_url.to_owned(),
                    reason: err.to_string(),
                })?;
        let server_name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned()).map_err(|err| {
            PoolError::ServerName {
                url: base_url.to_owned(),
                reason: err.to_string(),
            }
        })?;
        let origin = format!("{host}:{port}");
        Ok(Self {
            in_flight: metrics::streams_in_flight(&origin),
            opened_total: metrics::connections_opened(&origin),
            retired_total: Retirements::new(&origin),
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
            liveness: limits.liveness,
            max_streams: limits.streams_per_connection.max(1),
            opened: AtomicU64::new(0),
        })
    }

    /// The absolute URI of `path_and_query` on this origin. The string
    /// becomes the URI's buffer as it is (no copy): this runs once per
    /// APNs push.
    pub fn uri(&self, path_and_query: String) -> Result<Uri, http::Error> {
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(PathAndQuery::from_maybe_shared(Bytes::from(path_and_query))?);
        Ok(Uri::from_parts(parts)?)
    }

    /// Connections opened so far (reconnects included).
    pub fn connections_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Sends one request and reads the whole answer, all within the
    /// timeout (connecting included). `request` builds the request: once,
    /// unless the first connection it was sent on went away without the
    /// server processing it (then once per connection it goes to).
    pub async fn send(
        &self,
        request: impl FnMut() -> Request<()>,
        body: Bytes,
    ) -> Result<Response, TransportError> {
        self.in_flight.increment(1.0);
        // The connection the request was sent on, once it was.
        let mut sent_on = None;
        let exchange = self.exchange(request, body, &mut sent_on);
        let result = match tokio::time::timeout(self.timeout, exchange).await {
            Ok(result) => result,
            Err(_) => {
                if let Some(connection) = sent_on {
                    self.timed_out(&connection);
                }
                Err(TransportError::Timeout(self.timeout))
            }
        };
        self.in_flight.decrement(1.0);
        result
    }

    /// Counts a timeout against the connection the request was sent on and
    /// closes it when that makes `timeouts_in_a_row` (a draining one too:
    /// its streams in flight would only time out as well).
    fn timed_out(&self, connection: &Connection) {
        let in_a_row = connection.timeouts.fetch_add(1, Ordering::Relaxed) + 1;
        if in_a_row < self.liveness.timeouts_in_a_row.max(1) {
            return;
        }
        if connection.retire() {
            warn!(
                origin = %self.origin,
                connection = connection.number,
                timeouts = in_a_row,
                "HTTP/2 connection retired: requests time out in a row"
            );
            self.retired_total.timeouts.increment(1);
        }
        connection.task.abort();
    }

    /// Sends the request, on another connection again when the server did
    /// not process it (see [`never_processed`]), at most [`REROUTES`] moves.
    async fn exchange(
        &self,
        mut request: impl FnMut() -> Request<()>,
        body: Bytes,
        sent_on: &mut Option<Arc<Connection>>,
    ) -> Result<Response, TransportError> {
        let mut rerouted = 0;
        loop {
            let (connection, _stream, sender) = self.ready(&mut rerouted).await?;
            match self
                .exchange_on(&connection, sender, request(), body.clone(), sent_on)
                .await
            {
                Ok(response) => return Ok(response),
                Err(Failure::Unprocessed(err)) if rerouted < REROUTES => {
                    debug!(origin = %self.origin, connection = connection.number, error = %err, "request not processed by the server; sending it again");
                    rerouted += 1;
                }
                Err(Failure::Unprocessed(err)) => return Err(transport_error(err)),
                Err(Failure::Failed(err)) => return Err(err),
            }
        }
    }

    /// A connection ready for a new stream, and the stream's permit: one
    /// that went away or broke before the request left is left for a fresh
    /// one (counted in `rerouted`).
    async fn ready(
        &self,
        rerouted: &mut u32,
    ) -> Result<
        (
            Arc<Connection>,
            tokio::sync::OwnedSemaphorePermit,
            SendRequest<Bytes>,
        ),
        TransportError,
    > {
        loop {
            let connection = self.connection().await?;
            let stream = connection
                .streams
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| TransportError::Connection("connection closed".into()))?;
            match connection.sender.clone().ready().await {
                Ok(sender) => return Ok((connection, stream, sender)),
                // Gone away or broken before this request left: nothing was
                // sent, so it can go elsewhere right away.
                Err(err) => {
                    self.retire(&connection, &err);
                    if *rerouted == REROUTES {
                        return Err(TransportError::Connection(err.to_string()));
                    }
                    *rerouted += 1;
                }
            }
        }
    }

    /// One exchange on `connection`.
    async fn exchange_on(
        &self,
        connection: &Arc<Connection>,
        mut sender: SendRequest<Bytes>,
        request: Request<()>,
        body: Bytes,
        sent_on: &mut Option<Arc<Connection>>,
    ) -> Result<Response, Failure> {
        let failed = |err: h2::Error| {
            if connection_level(&err) {
                self.retire(connection, &err);
            }
            if never_processed(&err) {
                Failure::Unprocessed(err)
            } else {
                Failure::Failed(transport_error(err))
            }
        };
        let end_of_stream = body.is_empty();
        let (response, mut stream) = sender.send_request(request, end_of_stream).map_err(failed)?;
        *sent_on = Some(connection.clone());
        if !end_of_stream {
            stream.send_data(body, true).map_err(failed)?;
        }
        let response = response.await.map_err(failed)?;
        connection.answered();
        let (parts, mut received) = response.into_parts();
        let mut data = BytesMut::new();
        while let Some(chunk) = received.data().await {
            let chunk = chunk.map_err(failed)?;
            let _ = received.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        Ok(Response {
            status: parts.status,
            headers: parts.headers,
            body: data.freeze(),
        })
    }

    /// Takes `connection` out of the rotation after `err`; its streams in
    /// flight go on (a GOAWAY lets them finish; a broken connection fails
    /// them by itself).
    fn retire(&self, connection: &Connection, err: &h2::Error) {
        if !connection.retire() {
            return;
        }
        if err.is_go_away() && err.is_remote() {
            info!(origin = %self.origin, connection = connection.number, reason = ?err.reason(), "HTTP/2 connection going away; draining it");
            self.retired_total.went_away.increment(1);
        } else {
            debug!(origin = %self.origin, connection = connection.number, error = %err, "HTTP/2 connection broken");
            self.retired_total.broken.increment(1);
        }
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
        let (sender, mut driver) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake::<_, Bytes>(Coalesced(tls))
            .await
            .map_err(|err| fail(format!("HTTP/2 handshake: {err}")))?;
        let number = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
        let retired = Arc::new(AtomicBool::new(false));
        let flag = retired.clone();
        let pings = driver.ping_pong();
        let liveness = self.liveness;
        let origin = self.origin.clone();
        let task = tokio::spawn(async move {
            let ended = tokio::select! {
                ended = driver => ended.err().map(|err| err.to_string()),
                silent = keepalive(pings, liveness) => {
                    if !flag.swap(true, Ordering::Relaxed) {
                        warn!(%origin, connection = number, "HTTP/2 connection retired: {silent}");
                        ping_retirements(&origin).increment(1);
                    }
                    Some(silent)
                }
            };
            flag.store(true, Ordering::Relaxed);
            match ended {
                Some(err) => debug!(%origin, connection = number, error = %err, "HTTP/2 connection ended"),
                None => debug!(%origin, connection = number, "HTTP/2 connection closed"),
            }
        });
        self.opened_total.increment(1);
        info!(origin = %self.origin, connections_opened = number, "HTTP/2 connection open");
        Ok(Connection {
            sender,
            retired,
            task: task.abort_handle(),
            timeouts: AtomicU32::new(0),
            streams: Arc::new(tokio::sync::Semaphore::new(self.max_streams)),
            number,
        })
    }
}

/// Why one exchange on a connection got no answer.
enum Failure {
    /// The server says it never processed the request's stream: safe to
    /// send again.
    Unprocessed(h2::Error),
    Failed(TransportError),
}

/// True when `err` is the server's word that it never processed the
/// stream (RFC 9113 §8.7): a graceful GOAWAY (NO_ERROR) whose last stream
/// id is below it, or a REFUSED_STREAM reset. Other errors may come after
/// the server acted on the request, and are not sent again here.
fn never_processed(err: &h2::Error) -> bool {
    err.is_remote()
        && match err.reason() {
            Some(Reason::NO_ERROR) => err.is_go_away(),
            Some(Reason::REFUSED_STREAM) => err.is_reset(),
            _ => false,
        }
}

/// The connection, not only the stream, is done for.
fn connection_level(err: &h2::Error) -> bool {
    err.is_go_away() || err.is_io() || err.reason().is_none()
}

fn transport_error(err: h2::Error) -> TransportError {
    if connection_level(&err) {
        TransportError::Connection(err.to_string())
    } else {
        TransportError::Stream(err.to_string())
    }
}

/// PINGs the server every `ping_interval`; resolves, saying why, once one
/// goes unanswered for `ping_timeout`. Pends for ever if the connection
/// fails otherwise: its driver reports that.
async fn keepalive(pings: Option<PingPong>, liveness: Liveness) -> String {
    let Some(mut pings) = pings else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(liveness.ping_interval).await;
        match tokio::time::timeout(liveness.ping_timeout, pings.ping(Ping::opaque())).await {
            Ok(Ok(_pong)) => {}
            Ok(Err(_)) => return std::future::pending().await,
            Err(_) => return format!("no answer to a PING within {:?}", liveness.ping_timeout),
        }
    }
}
