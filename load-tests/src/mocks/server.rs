//! Serving HTTP over TLS (HTTP/2 only, or HTTP/2 and HTTP/1.1 as ALPN
//! negotiates) and plain HTTP/1.1 for the control API. A client that offers
//! no ALPN at all is served as Apple and Google serve it: HTTP/2 by prior
//! knowledge on an HTTP/2-only listener, otherwise whichever protocol its
//! first bytes speak.
//!
//! HTTP/2 is served with `h2` directly: each connection's streams are
//! answered inside that connection's task, without a task per stream as
//! hyper spawns. The mocks stand in for Apple's and Google's servers but
//! share the benchmark's two cores with the pipeline they measure, so every
//! microsecond they spend is taken from Clarion. Handlers get the request
//! with its body read: over HTTP/2 at most [`MAX_REQUEST_BODY`] bytes and
//! one more, so they can tell a body was too large; over HTTP/1.1 a larger
//! body is answered 413 before the handler sees it.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tracing::debug;

/// Concurrent streams each HTTP/2 connection may carry, as Apple advertises.
pub const MAX_CONCURRENT_STREAMS: u32 = 1000;
/// Request bodies are read up to this size, and one byte more.
pub const MAX_REQUEST_BODY: usize = 64 * 1024;

/// Which HTTP versions a TLS listener offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocols {
    /// ALPN `h2` only: an HTTP/1.1 client fails the handshake.
    Http2Only,
    /// ALPN `h2` and `http/1.1`.
    Http2AndHttp1,
}

impl Protocols {
    pub fn alpn(self) -> &'static [&'static [u8]] {
        match self {
            Protocols::Http2Only => &[b"h2"],
            Protocols::Http2AndHttp1 => &[b"h2", b"http/1.1"],
        }
    }
}

/// A running listener; aborted when dropped.
pub struct Listener {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `handler` over TLS on `addr` (port 0 picks one).
pub async fn serve_tls<H, F>(
    addr: SocketAddr,
    tls: Arc<ServerConfig>,
    handler: H,
) -> std::io::Result<Listener>
where
    H: Fn(Request<Bytes>, ConnectionId) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Bytes>> + Send + 'static,
{
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let offers_http1 = tls.alpn_protocols.iter().any(|p| p.as_slice() == b"http/1.1");
    let acceptor = TlsAcceptor::from(tls);
    let task = tokio::spawn(async move {
        let mut next_id = 0u64;
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            next_id += 1;
            let connection = ConnectionId(next_id);
            let acceptor = acceptor.clone();
            let handler = handler.clone();
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(tls) => tls,
                    Err(err) => {
                        debug!(error = %err, "TLS handshake refused");
                        return;
                    }
                };
                let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                match alpn.as_deref() {
                    Some(b"h2") => serve_http2(tls, connection, handler).await,
                    // No ALPN: clients that speak HTTP/2 by prior knowledge
                    // (aioapns, Pushy) are served as Apple serves them.
                    None if !offers_http1 => serve_http2(tls, connection, handler).await,
                    alpn => serve_hyper(tls, connection, handler, alpn.is_none()).await,
                }
            });
        }
    });
    Ok(Listener { addr, task })
}

/// A connection hyper serves: HTTP/1.1 when ALPN chose it, or, when the
/// client offered no ALPN, HTTP/1.1 or HTTP/2 as its first bytes tell.
async fn serve_hyper<T, H, F>(io: T, connection: ConnectionId, handler: H, sniff: bool)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Bytes>, ConnectionId) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Bytes>> + Send + 'static,
{
    let service = service_fn(move |request: Request<Incoming>| {
        let handler = handler.clone();
        async move {
            let response = match read_body(request).await {
                Ok(request) => handler(request, connection).await,
                Err(response) => response,
            };
            Ok::<_, Infallible>(response.map(Full::new))
        }
    });
    let io = TokioIo::new(io);
    let served = if sniff {
        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
            .serve_connection(io, service)
            .await
    } else {
        hyper::server::conn::http1::Builder::new()
            .serve_connection(io, service)
            .await
            .map_err(Into::into)
    };
    if let Err(err) = served {
        debug!(error = %err, "connection ended with an error");
    }
}

/// One HTTP/2 connection: accepts streams and answers them in this task.
async fn serve_http2<T, H, F>(io: T, connection: ConnectionId, handler: H)
where
    T: AsyncRead + AsyncWrite + Unpin,
    H: Fn(Request<Bytes>, ConnectionId) -> F,
    F: Future<Output = Response<Bytes>>,
{
    let handshake = h2::server::Builder::new()
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .initial_window_size(1 << 20)
        .initial_connection_window_size(16 << 20)
        .max_send_buffer_size(1 << 20)
        .handshake::<_, Bytes>(io)
        .await;
    let mut h2 = match handshake {
        Ok(h2) => h2,
        Err(err) => {
            debug!(error = %err, "HTTP/2 handshake failed");
            return;
        }
    };
    let mut streams = FuturesUnordered::new();
    loop {
        tokio::select! {
            accepted = h2.accept() => match accepted {
                Some(Ok((request, respond))) => streams.push(serve_stream(request, respond, connection, &handler)),
                Some(Err(err)) => {
                    debug!(error = %err, "HTTP/2 connection ended with an error");
                    return;
                }
                None => return,
            },
            Some(()) = streams.next(), if !streams.is_empty() => {}
        }
    }
}

/// One HTTP/2 stream: reads the body, asks the handler, sends the answer.
async fn serve_stream<H, F>(
    request: Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    connection: ConnectionId,
    handler: &H,
) where
    H: Fn(Request<Bytes>, ConnectionId) -> F,
    F: Future<Output = Response<Bytes>>,
{
    let (parts, mut received) = request.into_parts();
    let mut body = BytesMut::new();
    while body.len() <= MAX_REQUEST_BODY {
        match received.data().await {
            Some(Ok(chunk)) => {
                let _ = received.flow_control().release_capacity(chunk.len());
                body.extend_from_slice(&chunk);
            }
            Some(Err(err)) => {
                debug!(error = %err, "request body unreadable");
                return;
            }
            None => break,
        }
    }
    body.truncate(MAX_REQUEST_BODY + 1);
    let (parts, body) = handler(Request::from_parts(parts, body.freeze()), connection)
        .await
        .into_parts();
    let end_of_stream = body.is_empty();
    match respond.send_response(Response::from_parts(parts, ()), end_of_stream) {
        Ok(mut stream) if !end_of_stream => {
            if let Err(err) = stream.send_data(body, true) {
                debug!(error = %err, "response body not sent");
            }
        }
        Ok(_) => {}
        Err(err) => debug!(error = %err, "response not sent"),
    }
}

/// An HTTP/1.1 request with its body read, or the answer when it is too large.
async fn read_body(request: Request<Incoming>) -> Result<Request<Bytes>, Response<Bytes>> {
    let (parts, body) = request.into_parts();
    match Limited::new(body, MAX_REQUEST_BODY).collect().await {
        Ok(collected) => Ok(Request::from_parts(parts, collected.to_bytes())),
        Err(_) => Err(empty_response(413)),
    }
}

/// Serves `handler` over plain HTTP/1.1 (the control API).
pub async fn serve_plain<H, F>(addr: SocketAddr, handler: H) -> std::io::Result<Listener>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Bytes>> + Send + 'static,
{
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let handler = handler.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let response = handler(request);
                    async move { Ok::<_, Infallible>(response.await.map(Full::new)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    Ok(Listener { addr, task })
}

/// Identifies the TLS connection a request came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectionId(pub u64);

/// A response with a JSON body.
pub fn json_response(status: u16, body: &impl serde::Serialize) -> Response<Bytes> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    Response::builder()
        .status(status)
        .header(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json; charset=UTF-8"),
        )
        .body(Bytes::from(bytes))
        .unwrap_or_else(|_| Response::new(Bytes::new()))
}

/// A response with an empty body.
pub fn empty_response(status: u16) -> Response<Bytes> {
    Response::builder()
        .status(status)
        .body(Bytes::new())
        .unwrap_or_else(|_| Response::new(Bytes::new()))
}
