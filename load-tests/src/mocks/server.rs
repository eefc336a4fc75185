//! Serving HTTP over TLS (HTTP/2 only, or HTTP/2 and HTTP/1.1 as ALPN
//! negotiates) and plain HTTP/1.1 for the control API.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tracing::debug;

/// Concurrent streams each HTTP/2 connection may carry, as Apple advertises.
pub const MAX_CONCURRENT_STREAMS: u32 = 1000;

pub type Body = Full<Bytes>;

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
    H: Fn(Request<Incoming>, ConnectionId) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
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
                let is_h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                let service = service_fn(move |request| {
                    let response = handler(request, connection);
                    async move { Ok::<_, Infallible>(response.await) }
                });
                let io = TokioIo::new(tls);
                let result = if is_h2 {
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
                        .initial_stream_window_size(1 << 20)
                        .initial_connection_window_size(16 << 20)
                        .max_send_buf_size(1 << 20)
                        .serve_connection(io, service)
                        .await
                } else {
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await
                };
                if let Err(err) = result {
                    debug!(error = %err, "connection ended with an error");
                }
            });
        }
    });
    Ok(Listener { addr, task })
}

/// Serves `handler` over plain HTTP/1.1 (the control API).
pub async fn serve_plain<H, F>(addr: SocketAddr, handler: H) -> std::io::Result<Listener>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
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
                    async move { Ok::<_, Infallible>(response.await) }
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
pub fn json_response(status: u16, body: &serde_json::Value) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    Response::builder()
        .status(status)
        .header("content-type", "application/json; charset=UTF-8")
        .body(Full::new(Bytes::from(bytes)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

/// A response with an empty body.
pub fn empty_response(status: u16) -> Response<Body> {
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::new()))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}
