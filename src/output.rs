//! The guest's stdout and stderr: captured up to the output limit, and handed to an observer as
//! they are written so that front ends can stream them live.
//!
//! The guest writes unbuffered through WASI `fd_write`, so each write reaches [`OutputSink`] at
//! once. Past the limit the sink keeps what fits, appends a notice, and traps with
//! [`OutputLimitReached`]: the run stops there instead of printing into the void until a timeout.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

/// Which of the guest's output streams a chunk was written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Called with every chunk of output as the guest writes it, in order, from the thread running the
/// guest: keep it quick (queue the bytes, do not block on a slow peer).
pub type OutputObserver = Arc<dyn Fn(Stream, &[u8]) + Send + Sync>;

/// The trap raised when the output limit is reached.
#[derive(Debug, thiserror::Error)]
#[error("the output limit of {limit} bytes was reached")]
pub struct OutputLimitReached {
    pub limit: usize,
}

/// What one call has written so far, and its budget.
#[derive(Default)]
struct Call {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    truncated: bool,
    limit: usize,
    observer: Option<OutputObserver>,
}

/// Shared by the guest's two output streams, so the limit covers both together. A session's
/// streams live as long as its instance; [`OutputSink::begin`] gives each call a fresh budget.
#[derive(Clone, Default)]
pub(crate) struct OutputSink {
    call: Arc<Mutex<Call>>,
}

impl OutputSink {
    pub(crate) fn stream(&self, stream: Stream) -> SinkStream {
        SinkStream {
            sink: self.clone(),
            stream,
        }
    }

    /// Starts a call: nothing captured yet, `limit` bytes allowed, output shown to `observer`.
    pub(crate) fn begin(&self, limit: usize, observer: Option<OutputObserver>) {
        *self.lock() = Call {
            limit,
            observer,
            ..Call::default()
        };
    }

    /// Ends the call: takes what was captured, `(stdout, stderr)`, and lets go of the observer.
    pub(crate) fn take(&self) -> (Vec<u8>, Vec<u8>) {
        let mut c = self.lock();
        c.observer = None;
        (std::mem::take(&mut c.stdout), std::mem::take(&mut c.stderr))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Call> {
        self.call.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Captures `bytes` written to `stream`; past the limit, keeps what fits and refuses.
    pub(crate) fn write(&self, stream: Stream, bytes: &[u8]) -> Result<(), OutputLimitReached> {
        let mut c = self.lock();
        let limit = c.limit;
        if c.truncated {
            return Err(OutputLimitReached { limit });
        }
        let room = limit.saturating_sub(c.stdout.len() + c.stderr.len());
        let (kept, over) = if bytes.len() <= room {
            (bytes, false)
        } else {
            (&bytes[..room], true)
        };
        let buf = match stream {
            Stream::Stdout => &mut c.stdout,
            Stream::Stderr => &mut c.stderr,
        };
        let start = buf.len();
        buf.extend_from_slice(kept);
        if over {
            buf.extend_from_slice(
                format!("\n[output truncated: the {limit}-byte output limit was reached and the run was stopped]\n")
                    .as_bytes(),
            );
            c.truncated = true;
        }
        if let Some(observer) = &c.observer {
            let buf = match stream {
                Stream::Stdout => &c.stdout,
                Stream::Stderr => &c.stderr,
            };
            observer(stream, &buf[start..]);
        }
        if over {
            Err(OutputLimitReached { limit })
        } else {
            Ok(())
        }
    }
}

/// One of the guest's output streams, as WASI sees it.
pub(crate) struct SinkStream {
    sink: OutputSink,
    stream: Stream,
}

impl IsTerminal for SinkStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for SinkStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(SinkStream {
            sink: self.sink.clone(),
            stream: self.stream,
        })
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(SinkStream {
            sink: self.sink.clone(),
            stream: self.stream,
        })
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for SinkStream {
    async fn ready(&mut self) {}
}

impl OutputStream for SinkStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.sink
            .write(self.stream, &bytes)
            .map_err(|e| StreamError::Trap(wasmtime::Error::new(e)))
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 << 10)
    }
}

impl tokio::io::AsyncWrite for SinkStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(
            self.sink
                .write(self.stream, buf)
                .map(|()| buf.len())
                .map_err(std::io::Error::other),
        )
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_past_the_limit_is_cut_with_a_notice_and_refused() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        let sink = OutputSink::default();
        sink.begin(
            10,
            Some(Arc::new(move |_, b: &[u8]| {
                seen2.lock().unwrap().extend_from_slice(b)
            })),
        );
        sink.write(Stream::Stdout, b"hello").unwrap();
        sink.write(Stream::Stderr, b"wor").unwrap();
        assert!(sink.write(Stream::Stdout, b"ld!!").is_err());
        assert!(sink.write(Stream::Stdout, b"more").is_err());
        let (out, err) = sink.take();
        assert!(
            out.starts_with(b"hellold\n[output truncated"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert_eq!(err, b"wor");
        assert!(String::from_utf8_lossy(&seen.lock().unwrap()).contains("output truncated"));

        // The next call of a session starts with a fresh budget.
        sink.begin(10, None);
        sink.write(Stream::Stdout, b"again").unwrap();
        assert_eq!(sink.take().0, b"again");
    }
}
