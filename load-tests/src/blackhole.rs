//! A TCP proxy for fault tests that can turn into a black hole: it forwards
//! each connection to a target until told to black-hole it, then forwards
//! nothing more in either direction and closes nothing — what a dead route
//! or a silently dropping firewall looks like to both ends (no FIN, no RST,
//! just silence). Listens on 127.0.0.1 only.
//!
//! [`BlackHoleProxy::black_hole_open`] freezes the connections open at that
//! moment while new ones are forwarded normally (a route that died under
//! long-lived connections); [`BlackHoleProxy::black_hole_new`] makes every
//! later connection silent from the start, until [`BlackHoleProxy::restore`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::debug;

/// A running proxy; every socket it holds is closed when it is dropped.
pub struct BlackHoleProxy {
    /// Where clients connect instead of the target.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accepting: JoinHandle<()>,
}

struct Shared {
    target: SocketAddr,
    /// Bumped by `black_hole_open`: a connection accepted under an older
    /// generation stops forwarding.
    generation: watch::Sender<u64>,
    /// Later connections are held silent from the start.
    silent_new: AtomicBool,
    /// Set when the proxy is dropped: every connection task ends.
    stopped: watch::Sender<bool>,
    accepted: AtomicU64,
}

impl BlackHoleProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            target,
            generation: watch::Sender::new(0),
            silent_new: AtomicBool::new(false),
            stopped: watch::Sender::new(false),
            accepted: AtomicU64::new(0),
        });
        let accepting = tokio::spawn(accept(listener, shared.clone()));
        Ok(Self {
            addr,
            shared,
            accepting,
        })
    }

    /// Stops forwarding on every connection open now, in both directions,
    /// without closing any socket. Later connections are not affected.
    pub fn black_hole_open(&self) {
        self.shared.generation.send_modify(|generation| *generation += 1);
    }

    /// Every connection from now on is accepted and then ignored.
    pub fn black_hole_new(&self) {
        self.shared.silent_new.store(true, Ordering::SeqCst);
    }

    /// New connections are forwarded again (black-holed ones stay so).
    pub fn restore(&self) {
        self.shared.silent_new.store(false, Ordering::SeqCst);
    }

    /// Connections accepted so far.
    pub fn connections_accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for BlackHoleProxy {
    fn drop(&mut self) {
        self.accepting.abort();
        self.shared.stopped.send_replace(true);
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut stopped = shared.stopped.subscribe();
            if shared.silent_new.load(Ordering::SeqCst) {
                // Held open, never read, until the proxy stops.
                until_stopped(&mut stopped).await;
                drop(client);
                return;
            }
            let mut generation = shared.generation.subscribe();
            let born = *generation.borrow_and_update();
            let upstream = match TcpStream::connect(shared.target).await {
                Ok(upstream) => upstream,
                Err(err) => {
                    debug!(error = %err, "black-hole proxy cannot reach its target");
                    return;
                }
            };
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            let (mut client_read, mut client_write) = client.into_split();
            let (mut upstream_read, mut upstream_write) = upstream.into_split();
            tokio::select! {
                _ = async {
                    tokio::join!(
                        pipe(&mut client_read, &mut upstream_write),
                        pipe(&mut upstream_read, &mut client_write),
                    )
                } => {}
                _ = until_black_holed(&mut generation, born) => {
                    // Black-holed: keep every half open, move nothing.
                    until_stopped(&mut stopped).await;
                }
                _ = until_stopped(&mut stopped) => {}
            }
        });
    }
}

async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stopped| *stopped).await;
}

async fn until_black_holed(generation: &mut watch::Receiver<u64>, born: u64) {
    let _ = generation.wait_for(|now| *now > born).await;
}

/// Copies one direction until its end, then passes the end on.
async fn pipe<R, W>(from: &mut R, to: &mut W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let _ = tokio::io::copy(from, to).await;
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncReadExt;

    use super::*;

    /// An echo server on 127.0.0.1.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = socket.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        addr
    }

    async fn round_trip(socket: &mut TcpStream, within: Duration) -> Option<[u8; 4]> {
        socket.write_all(b"ping").await.ok()?;
        let mut answer = [0u8; 4];
        tokio::time::timeout(within, socket.read_exact(&mut answer))
            .await
            .ok()?
            .ok()?;
        Some(answer)
    }

    #[tokio::test]
    async fn forwards_until_black_holed_then_forwards_only_new_connections() {
        let proxy = BlackHoleProxy::start(echo().await).await.unwrap();
        let mut old = TcpStream::connect(proxy.addr).await.unwrap();
        assert_eq!(round_trip(&mut old, Duration::from_secs(5)).await, Some(*b"ping"));

        proxy.black_hole_open();
        // Silence is what is being checked, so this waits a while on purpose.
        assert_eq!(round_trip(&mut old, Duration::from_millis(300)).await, None);
        let mut probe = [0u8; 1];
        let still_open = tokio::time::timeout(Duration::from_millis(100), old.read(&mut probe)).await;
        assert!(still_open.is_err(), "no FIN, no RST: the read just waits");

        let mut new = TcpStream::connect(proxy.addr).await.unwrap();
        assert_eq!(round_trip(&mut new, Duration::from_secs(5)).await, Some(*b"ping"));

        proxy.black_hole_new();
        let mut silent = TcpStream::connect(proxy.addr).await.unwrap();
        assert_eq!(round_trip(&mut silent, Duration::from_millis(300)).await, None);
        proxy.restore();
        let mut again = TcpStream::connect(proxy.addr).await.unwrap();
        assert_eq!(
            round_trip(&mut again, Duration::from_secs(5)).await,
            Some(*b"ping")
        );
        assert_eq!(proxy.connections_accepted(), 4);
    }
}
