//! Downloading the wheel from a server on the loopback interface that answers one canned response.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::thread::{self, JoinHandle};

use super::super::artifacts::find_with;
use super::super::fetch::fetch_with;
use super::*;
use crate::cpython::{Artifacts, ArtifactsError, DownloadFailure, Mismatch};

/// Serves one connection: reads the request's head, writes `response`, closes. Returns the URL.
fn serve(response: Vec<u8>) -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/{}",
        listener.local_addr().unwrap(),
        PINNED.wheel.name
    );
    let server = thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
            line.clear();
        }
        // The client may hang up first, having refused what it was sent.
        let _ = reader.get_mut().write_all(&response);
    });
    (url, server)
}

fn response(head: &str, body: &[u8]) -> Vec<u8> {
    [
        format!("HTTP/1.1 {head}\r\nConnection: close\r\n\r\n").as_bytes(),
        body,
    ]
    .concat()
}

/// Fetches `fake` with the server answering `response`; returns the result and the progress seen.
fn fetch(
    fake: &Fake,
    cache: &Path,
    response: Vec<u8>,
) -> (Result<Artifacts, ArtifactsError>, Vec<Progress>) {
    let (url, server) = serve(response);
    let pins = fake.pins(&url);
    let mut seen = Vec::new();
    let fetched = fetch_with(&pins, cache, &mut |p| seen.push(p));
    server.join().unwrap();
    (fetched, seen)
}

/// Nothing installed, and nothing left but the lock.
fn assert_nothing_left(fake: &Fake, cache: &Path) {
    assert_eq!(find_with(&fake.pins("unused"), cache).unwrap(), None);
    assert_eq!(names(cache), [format!("{}.lock", PINNED.install_dir)]);
}

#[test]
fn downloads_with_progress_then_installs() {
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    let fake = Fake::new();
    let length = format!("200 OK\r\nContent-Length: {}", fake.wheel.len());
    let (fetched, seen) = fetch(&fake, &cache, response(&length, &fake.wheel));
    let installed = fetched.unwrap();
    assert_stages(&seen, &[Stage::Download, Stage::Extract]);
    assert!(seen.len() > 2, "no progress while downloading: {seen:?}");
    fake.assert_installed(installed.dir());
    assert_eq!(
        names(&cache),
        [
            PINNED.install_dir.to_owned(),
            format!("{}.lock", PINNED.install_dir)
        ]
    );
}

#[test]
fn a_server_sending_more_than_the_pinned_size_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    let fake = Fake::new();
    let longer = [&fake.wheel[..], &[0u8; 1000][..]].concat();
    // Without a length, the body runs until the server closes.
    let (fetched, seen) = fetch(&fake, &cache, response("200 OK", &longer));
    let refused = fetched.unwrap_err();
    assert!(
        matches!(
            &refused,
            ArtifactsError::Download {
                cause: DownloadFailure::TooLong { .. },
                ..
            }
        ),
        "{refused}"
    );
    let pinned = fake.wheel.len() as u64;
    assert!(
        seen.iter().all(|p| p.done <= pinned + 1),
        "read past the pin"
    );
    assert_nothing_left(&fake, &cache);
    // With a length, before reading any of it.
    let length = format!("200 OK\r\nContent-Length: {}", longer.len());
    let (fetched, _) = fetch(&fake, &cache, response(&length, &longer));
    let refused = fetched.unwrap_err();
    assert!(
        matches!(
            &refused,
            ArtifactsError::Download {
                cause: DownloadFailure::Length { .. },
                ..
            }
        ),
        "{refused}"
    );
    assert_nothing_left(&fake, &cache);
}

#[test]
fn a_connection_closed_early_is_an_error_and_installs_nothing() {
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    let fake = Fake::new();
    let half = &fake.wheel[..fake.wheel.len() / 2];
    for head in [
        format!("200 OK\r\nContent-Length: {}", fake.wheel.len()),
        "200 OK".to_owned(),
    ] {
        let (fetched, _) = fetch(&fake, &cache, response(&head, half));
        let refused = fetched.unwrap_err();
        let message = refused.to_string();
        assert!(
            matches!(refused, ArtifactsError::Download { .. }),
            "{message}"
        );
        assert!(message.contains("--cpython-wheel PATH"), "{message}");
        assert_nothing_left(&fake, &cache);
    }
}

#[test]
fn a_wrong_download_or_an_http_error_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    let fake = Fake::new();
    let mut other = fake.wheel.clone();
    other[10] ^= 1;
    let (fetched, _) = fetch(&fake, &cache, response("200 OK", &other));
    let refused = fetched.unwrap_err();
    assert!(
        matches!(
            refused,
            ArtifactsError::BadWheel {
                why: Mismatch::Digest { .. },
                ..
            }
        ),
        "{refused}"
    );
    assert_nothing_left(&fake, &cache);
    let (fetched, _) = fetch(
        &fake,
        &cache,
        response("404 Not Found\r\nContent-Length: 0", b""),
    );
    let refused = fetched.unwrap_err();
    assert!(refused.to_string().contains("404"), "{refused}");
    assert_nothing_left(&fake, &cache);
}
