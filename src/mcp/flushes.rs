//! The connection wrapper through which both transports tell sessions that a reply is out (see
//! [`crate::session::registry::RepliesOut`]): stdio wraps stdout in it, HTTP each TCP connection.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::session::registry::RepliesOut;

/// A connection that reports each completed flush of written bytes. rmcp flushes stdout after every
/// message, and hyper flushes its connection after writing each response (or event of a response
/// stream), so a reply is out when the flush that follows its writing completes. A flush with
/// nothing written since the last one (hyper flushes while it reads, too) reports nothing.
pub(crate) struct Flushes<IO> {
    inner: IO,
    replies: RepliesOut,
    wrote: bool,
}

impl<IO> Flushes<IO> {
    pub(crate) fn new(inner: IO, replies: RepliesOut) -> Self {
        Flushes {
            inner,
            replies,
            wrote: false,
        }
    }

    fn written(&mut self, written: Poll<std::io::Result<usize>>) -> Poll<std::io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = written {
            self.wrote |= n > 0;
        }
        written
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Flushes<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.written(written)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.written(written)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let flushed = ready!(Pin::new(&mut self.inner).poll_flush(cx));
        if flushed.is_ok() && std::mem::take(&mut self.wrote) {
            self.replies.sent();
        }
        Poll::Ready(flushed)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Flushes<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A reply is out when the flush after its writing completes: not when it is written, and not
    /// on a flush with nothing written.
    #[tokio::test]
    async fn a_completed_flush_of_a_reply_tells_the_sessions_that_it_is_out() {
        let replies = RepliesOut::default();
        let watch = replies.watch(Duration::from_secs(600));
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut connection = Flushes::new(ours, replies);
        let told = |within| tokio::time::timeout(within, watch.next_reply());

        let next = told(Duration::from_millis(50));
        connection.flush().await.unwrap();
        theirs.write_all(b"request").await.unwrap();
        let mut request = [0; 7];
        connection.read_exact(&mut request).await.unwrap();
        assert_eq!(&request, b"request", "reads pass through");
        connection.flush().await.unwrap();
        assert!(next.await.is_err(), "told by flushes of nothing");

        let next = told(Duration::from_millis(50));
        connection
            .write_all(b"{\"jsonrpc\":\"2.0\"}\n")
            .await
            .unwrap();
        assert!(next.await.is_err(), "told before the flush");

        let next = told(Duration::from_secs(60));
        connection.flush().await.unwrap();
        assert!(next.await.is_ok(), "not told after the flush");
    }
}
