//! Makes `h2` copy small request bodies into its write buffer instead of
//! writing them separately, so many requests leave in one TLS record and
//! one system call.
//!
//! `h2` buffers frames in a 16 KiB buffer but "chains" a DATA payload of 256
//! bytes or more as a separate buffer when the transport supports vectored
//! writes, and then flushes before it buffers the next frame. An FCM message
//! (the token and the notification, 300-700 bytes) crosses that line, so
//! every push became its own TLS record and its own `writev`: about one
//! system call per push, measured with `perf stat` in the 90in2 benchmark.
//! Reporting "no vectored writes" raises `h2`'s threshold to 1 KiB, which
//! typical alerts stay under; the TLS layer below still writes its records
//! vectored.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A transport that tells `h2` it has no vectored writes.
pub struct Coalesced<T>(pub T);

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}
