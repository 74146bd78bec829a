//! Stdio: stdin at its end, stdout and stderr written to the sink, whose limit traps, and
//! nothing that seeks.

use super::*;
use crate::output::Stream;
use crate::vfs::fd_calls::{self as fd, WriteError};

#[test]
fn stdio_writes_reach_the_sink_and_its_limit_traps() {
    let sink = OutputSink::default();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    sink.begin(
        12,
        Some(Arc::new(move |stream, bytes: &[u8]| {
            seen2.lock().unwrap().push((stream, bytes.to_vec()))
        })),
    );
    let (mut mem, mut files) = (mem(), files_with(sink.clone()));
    put(&mut mem, BUF_AT, b"hello world!");
    let (iovs, n) = iovecs(&mut mem, &[(BUF_AT, 6), (BUF_AT + 6, 0), (BUF_AT + 6, 3)]);
    fd::fd_write(&mut mem, &mut files, 1, iovs, n, OUT_AT).unwrap();
    assert_eq!(u32_at(&mem, OUT_AT), 9);
    let (iovs, n) = iovecs(&mut mem, &[(BUF_AT, 2)]);
    fd::fd_write(&mut mem, &mut files, 2, iovs, n, OUT_AT).unwrap();
    assert_eq!(
        seen.lock().unwrap()[..],
        [
            (Stream::Stdout, b"hello ".to_vec()),
            (Stream::Stdout, b"wor".to_vec()),
            (Stream::Stderr, b"he".to_vec())
        ]
    );
    // One byte is left of the 12.
    assert!(matches!(
        fd::fd_write(&mut mem, &mut files, 1, iovs, n, OUT_AT),
        Err(WriteError::Limit(_))
    ));
    let (out, err) = sink.take();
    assert!(out.starts_with(b"hello worh\n[output truncated"));
    assert_eq!(err, b"he");

    // Stdin is at its end and nothing on stdio seeks.
    let (iovs, n) = iovecs(&mut mem, &[(BUF_AT, 10)]);
    fd::fd_read(&mut mem, &mut files, 0, iovs, n, OUT_AT).unwrap();
    assert_eq!(u32_at(&mem, OUT_AT), 0);
    assert_eq!(
        fd::fd_read(&mut mem, &mut files, 1, iovs, n, OUT_AT),
        Err(Errno::Badf)
    );
    assert!(matches!(
        fd::fd_write(&mut mem, &mut files, 0, iovs, n, OUT_AT),
        Err(WriteError::Errno(Errno::Badf))
    ));
    for fd_ in 0..3 {
        assert_eq!(
            fd::fd_seek(&mut mem, &mut files, fd_, 0, 1, OUT_AT),
            Err(Errno::Spipe)
        );
        assert_eq!(
            fd::fd_tell(&mut mem, &files, fd_, OUT_AT),
            Err(Errno::Spipe)
        );
        assert_eq!(
            fd::fd_pread(&mut mem, &files, fd_, iovs, n, 0, OUT_AT),
            Err(Errno::Spipe)
        );
        let pwrite = fd::fd_pwrite(&mut mem, &mut files, fd_, iovs, n, 0, OUT_AT);
        assert_eq!(pwrite, Err(Errno::Spipe));
    }
}
