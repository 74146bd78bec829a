//! The server on stdio, telling sessions when each reply is out (see [`Flushes`]), reading and
//! writing stdio on the runtime's own threads where it can ([`streams`]).

use rmcp::ServiceExt;

use super::flushes::Flushes;
use super::{PythonServer, termination};
use crate::session::registry::RepliesOut;

/// Serves one client on stdio until it closes stdin (in-flight calls get rmcp's 5 s to finish) or
/// the process is asked to stop (SIGTERM, or SIGINT / Ctrl-C): then runs in progress are dropped,
/// which stops them, and the server exits 0 at once. A client that closes stdin before it has
/// initialized is no failure either.
pub async fn serve(server: PythonServer, replies: RepliesOut) -> anyhow::Result<()> {
    let session = async {
        let (stdin, stdout) = streams();
        let stdout = Flushes::new(stdout, replies);
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

type Reader = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
type Writer = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// stdin and stdout, read and written by the runtime's workers themselves where both are pipes or
/// stream sockets, as MCP clients make them (Node's child processes get sockets, Python's pipes).
/// tokio's `stdin()` and `stdout()` hand each read and each write to a blocking thread instead,
/// so every request and every reply waited for one more thread to wake: 9.8 voluntary context
/// switches per fresh CPython call, against 3.2 this way. Anything else (a terminal, a file) is
/// served as before.
fn streams() -> (Reader, Writer) {
    #[cfg(unix)]
    if let Some(streams) = unix::streams(std::io::stdin(), std::io::stdout(), std::io::stderr()) {
        return streams;
    }
    let (stdin, stdout) = rmcp::transport::stdio();
    (Box::new(stdin), Box::new(stdout))
}

#[cfg(unix)]
mod unix {
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

    use rustix::fs::{FileType, Stat};
    use tokio::net::unix::pipe;

    use super::{Reader, Writer};

    /// What a stdio descriptor refers to, when the runtime can wait on it.
    #[derive(Clone, Copy)]
    enum Kind {
        Pipe,
        Socket,
    }

    fn kind(fd: BorrowedFd<'_>, stat: &Stat) -> Option<Kind> {
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Fifo => Some(Kind::Pipe),
            FileType::Socket => (rustix::net::sockopt::socket_type(fd).ok()?
                == rustix::net::SocketType::STREAM)
                .then_some(Kind::Socket),
            _ => None,
        }
    }

    fn same_file(a: &Stat, b: &Stat) -> bool {
        (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
    }

    /// `stdin` and `stdout` as non-blocking streams of the runtime, if both are pipes or stream
    /// sockets and `stderr` is neither of them: non-blocking mode belongs to what the descriptors
    /// share, and the logs' blocking writes to stderr (`2>&1`) would then fail when it is full.
    /// `None` leaves all three as they were.
    pub(super) fn streams(
        stdin: impl AsFd,
        stdout: impl AsFd,
        stderr: impl AsFd,
    ) -> Option<(Reader, Writer)> {
        let (stdin, stdout) = (stdin.as_fd(), stdout.as_fd());
        let input = rustix::fs::fstat(stdin).ok()?;
        let output = rustix::fs::fstat(stdout).ok()?;
        if let Ok(err) = rustix::fs::fstat(stderr)
            && (same_file(&err, &input) || same_file(&err, &output))
        {
            return None;
        }
        let kinds = (kind(stdin, &input)?, kind(stdout, &output)?);
        let opened = reader(stdin, kinds.0).and_then(|r| Ok((r, writer(stdout, kinds.1)?)));
        if opened.is_err() {
            // One of them may have been made non-blocking before the other failed.
            for fd in [stdin, stdout] {
                let _ = rustix::io::ioctl_fionbio(fd, false);
            }
        }
        opened.ok()
    }

    fn reader(fd: BorrowedFd<'_>, kind: Kind) -> std::io::Result<Reader> {
        let fd = fd.try_clone_to_owned()?;
        Ok(match kind {
            Kind::Pipe => Box::new(pipe::Receiver::from_owned_fd(fd)?),
            Kind::Socket => Box::new(socket(fd)?),
        })
    }

    fn writer(fd: BorrowedFd<'_>, kind: Kind) -> std::io::Result<Writer> {
        let fd = fd.try_clone_to_owned()?;
        Ok(match kind {
            Kind::Pipe => Box::new(pipe::Sender::from_owned_fd(fd)?),
            Kind::Socket => Box::new(socket(fd)?),
        })
    }

    /// A stream socket of any family, read and written as one: a Unix socket only names the
    /// type that tokio waits on.
    fn socket(fd: OwnedFd) -> std::io::Result<tokio::net::UnixStream> {
        let socket = std::os::unix::net::UnixStream::from(fd);
        socket.set_nonblocking(true)?;
        tokio::net::UnixStream::from_std(socket)
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::fd::{AsFd, OwnedFd};
    use std::os::unix::net::{UnixDatagram, UnixStream};

    use rustix::fs::OFlags;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::unix::streams;

    fn blocking(fd: impl AsFd) -> bool {
        !rustix::fs::fcntl_getfl(fd)
            .expect("the flags")
            .contains(OFlags::NONBLOCK)
    }

    /// A pipe's read end and write end.
    fn pipe() -> (OwnedFd, OwnedFd) {
        let (read, write) = std::io::pipe().expect("a pipe");
        (read.into(), write.into())
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("a runtime")
    }

    /// A pipe in and a socket out, as a client would make them, carry bytes both ways, read and
    /// written without blocking.
    #[test]
    fn pipes_and_stream_sockets_are_read_and_written_by_the_runtime() {
        let (stdin, client_in) = pipe();
        let (stdout, client_out) = UnixStream::pair().expect("a socket pair");
        let (_, stderr) = pipe();
        runtime().block_on(async {
            let (mut reader, mut writer) = streams(&stdin, &stdout, &stderr).expect("served");
            rustix::io::write(&client_in, b"request\n").expect("written");
            let mut request = [0; 8];
            reader.read_exact(&mut request).await.expect("read");
            assert_eq!(&request, b"request\n");
            writer.write_all(b"reply\n").await.expect("written");
            writer.flush().await.expect("flushed");
        });
        let mut reply = [0; 6];
        std::io::Read::read_exact(&mut &client_out, &mut reply).expect("the reply");
        assert_eq!(&reply, b"reply\n");
        assert!(!blocking(&stdin) && !blocking(&stdout) && blocking(&stderr));
    }

    /// With stderr on stdout's pipe (`2>&1`), the logs' writes would fail once it is full.
    #[test]
    fn stderr_on_stdout_keeps_stdio_blocking() {
        let (stdin, _client_in) = pipe();
        let (_client_out, stdout) = pipe();
        runtime().block_on(async {
            assert!(streams(&stdin, &stdout, &stdout).is_none());
            assert!(streams(&stdin, &stdout, &stdin).is_none());
        });
        assert!(blocking(&stdin) && blocking(&stdout));
    }

    /// A file or a datagram socket on either side leaves both as they were, and so does a side
    /// that fails once the other was made non-blocking (a pipe's read end as stdout).
    #[test]
    fn anything_else_leaves_stdio_as_it_was() {
        let (stdin, _client_in) = pipe();
        let (_client_out, stdout) = pipe();
        let (_, stderr) = pipe();
        let file = tempfile::tempfile().expect("a file");
        let (datagram, _) = UnixDatagram::pair().expect("a datagram pair");
        let (read_end, _write_end) = pipe();
        runtime().block_on(async {
            assert!(streams(&file, &stdout, &stderr).is_none());
            assert!(streams(&stdin, &file, &stderr).is_none());
            assert!(streams(&stdin, &datagram, &stderr).is_none());
            assert!(streams(&stdin, &read_end, &stderr).is_none());
        });
        assert!(blocking(&stdin) && blocking(&stdout) && blocking(&read_end));
    }
}
