//! The server on stdio, telling sessions when each reply is out (see
//! [`crate::session::registry::RepliesOut`]).

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use rmcp::ServiceExt;
use tokio::io::AsyncWrite;

use super::{PythonServer, termination};
use crate::session::registry::RepliesOut;

/// Serves one client on stdio until it closes stdin (in-flight calls get rmcp's 5 s to finish) or
/// the process is asked to stop (SIGTERM, or SIGINT / Ctrl-C): then runs in progress are dropped,
/// which stops them, and the server exits 0 at once. A client that closes stdin before it has
/// initialized is no failure either.
pub async fn serve(server: PythonServer, replies: RepliesOut) -> anyhow::Result<()> {
    let session = async {
        let (stdin, stdout) = rmcp::transport::stdio();
        let stdout = Flushes {
            inner: stdout,
            replies,
        };
        let service = match server.serve((stdin, stdout)).await {
            Ok(service) => service,
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
                tracing::info!("the client closed stdin before initializing");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        service.waiting().await?;
        Ok(())
    };
    tokio::select! {
        ended = session => ended,
        signal = termination() => {
            tracing::info!("{signal}: stopping the runs in progress and exiting");
            Ok(())
        }
    }
}

/// A writer that reports each completed flush: rmcp flushes after every message, so a reply is
/// out (in the pipe to the client) when its flush completes.
struct Flushes<W> {
    inner: W,
    replies: RepliesOut,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Flushes<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let flushed = ready!(Pin::new(&mut self.inner).poll_flush(cx));
        if flushed.is_ok() {
            self.replies.sent();
        }
        Poll::Ready(flushed)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;

    use super::*;

    /// A reply is out when its flush completes, not when it is written.
    #[tokio::test]
    async fn a_completed_flush_tells_the_sessions_that_a_reply_is_out() {
        let replies = RepliesOut::default();
        let next = replies.watch(Duration::from_secs(600)).next_reply();
        tokio::pin!(next);
        let mut stdout = Flushes {
            inner: tokio::io::sink(),
            replies,
        };
        stdout.write_all(b"{\"jsonrpc\":\"2.0\"}\n").await.unwrap();
        let early = tokio::time::timeout(Duration::from_millis(50), &mut next).await;
        assert!(early.is_err(), "told before the flush");
        stdout.flush().await.unwrap();
        let told = tokio::time::timeout(Duration::from_secs(60), next).await;
        assert!(told.is_ok(), "not told after the flush");
    }
}
