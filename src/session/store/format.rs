//! A session's state as the store keeps it: one versioned, checksummed, compressed blob.
//!
//! The blob is read back by any replica, of any version, and whoever can write to the store can
//! write it: so it is read as hostile input. A blob that is not ours, was written by a server
//! whose guest differs ([`Fingerprint`]), fails its checksum or does not parse is refused with a
//! reason; every size in it is checked before anything is allocated, the pages go through
//! [`Snapshot::from_pages`], the input files through [`InputFiles::new`] and `/out` through the
//! guest's own folder calls, each with this server's limits, never limits read from the blob.
//!
//! Layout: [`MAGIC`], the format version (u32), the writer (the server's version and engine, a
//! length byte and text: what an incompatible state names), the BLAKE3 hash of what follows it,
//! the size of the uncompressed body (u64), then the body as one LZ4 block. The body: the fingerprint, the
//! memory's size, its saved pages (offset and [`PAGE`] bytes each), the input files and the `/out`
//! entries. Integers are little-endian.

// Used by the store's client; compiled (and tested) without it too.
#![cfg_attr(not(feature = "store"), allow(dead_code))]

use crate::sandbox::files::{FileLimits, InputFiles};
use crate::sandbox::pagemap::PAGE;
use crate::sandbox::snapshot::Snapshot;
use crate::vfs::Folder;

const MAGIC: &[u8; 8] = b"SPYSESS\0";
/// Bumped whenever the layout changes: a blob of another version is refused, not guessed at.
pub const FORMAT: u32 = 1;
/// The longest writer a blob names.
const MAX_WRITER: usize = u8::MAX as usize;

/// What makes a session's memory meaningful to an instance: this server's version and the memory
/// the snapshot's pages were taken against ([`crate::sandbox::Sandbox::session_fingerprint`]).
pub type Fingerprint = [u8; 32];

/// A session at rest, as decoded.
#[derive(Debug)]
pub struct State {
    pub snapshot: Snapshot,
    /// The input files and `/out`, once a call gave files.
    pub files: Option<(InputFiles, Folder)>,
}

/// Why a stored blob cannot become a session.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("was written by an incompatible server ({0})")]
    Incompatible(String),
    #[error("is unreadable ({0})")]
    Unreadable(String),
}

/// What a decoded session may hold: this server's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The memory limit of a call: a larger memory could not be restored anyway.
    pub memory_bytes: usize,
    pub files: FileLimits,
}

impl Bounds {
    /// The largest body a session within these bounds encodes to: its memory's pages with their
    /// offsets, and the files with their paths and sizes.
    fn max_body(&self) -> usize {
        let pages = self.memory_bytes / PAGE;
        let per_entry = self.files.max_path_bytes + 16;
        32 + 16
            + pages * (PAGE + 8)
            + self.files.max_total_bytes
            + self.files.max_out_bytes
            + (self.files.max_files + self.files.max_out_entries) * per_entry
            + 8
    }
}

/// The blob for `snapshot` and `files`, taken on a server with `fingerprint`; `writer` names that
/// server, its version and engine.
pub fn encode(
    writer: &str,
    fingerprint: &Fingerprint,
    snapshot: &Snapshot,
    files: Option<&(InputFiles, Folder)>,
) -> Vec<u8> {
    let mut body = Vec::with_capacity(64 + snapshot.offsets.len() * (PAGE + 8));
    body.extend_from_slice(fingerprint);
    put_u64(&mut body, snapshot.len);
    put_u64(&mut body, snapshot.offsets.len());
    for (offset, page) in snapshot.pages() {
        put_u64(&mut body, offset);
        body.extend_from_slice(page);
    }
    body.push(u8::from(files.is_some()));
    if let Some((inputs, folder)) = files {
        put_u64(&mut body, inputs.len());
        for (path, bytes) in inputs.files() {
            put_bytes(&mut body, path.as_bytes());
            put_bytes(&mut body, bytes);
        }
        let out = folder.entries_by_path();
        put_u64(&mut body, out.len());
        for (path, data) in out {
            put_bytes(&mut body, path.as_bytes());
            match data {
                None => body.push(0),
                Some(data) => {
                    body.push(1);
                    put_bytes(&mut body, &data);
                }
            }
        }
    }
    let packed = lz4_flex::block::compress(&body);
    let writer = &writer.as_bytes()[..writer.len().min(MAX_WRITER)];
    let mut blob = Vec::with_capacity(MAGIC.len() + 4 + 1 + writer.len() + 40 + packed.len());
    blob.extend_from_slice(MAGIC);
    blob.extend_from_slice(&FORMAT.to_le_bytes());
    blob.push(writer.len() as u8);
    blob.extend_from_slice(writer);
    let mut hasher = blake3::Hasher::new();
    hasher.update(&(body.len() as u64).to_le_bytes());
    hasher.update(&packed);
    blob.extend_from_slice(hasher.finalize().as_bytes());
    put_u64(&mut blob, body.len());
    blob.extend_from_slice(&packed);
    blob
}

/// The session in `blob`, if it was written by a server like this one (`writer`, `fingerprint`)
/// and fits `bounds`.
pub fn decode(
    blob: &[u8],
    writer: &str,
    fingerprint: &Fingerprint,
    bounds: Bounds,
) -> Result<State, FormatError> {
    let unreadable = |what: &str| FormatError::Unreadable(what.to_owned());
    let incompatible = |why: String| FormatError::Incompatible(why);
    let mut header = Reader(blob);
    if header.take(MAGIC.len()).ok() != Some(MAGIC) {
        return Err(incompatible("not a session state".into()));
    }
    let format = u32::from_le_bytes(header.take(4)?.try_into().expect("4 bytes"));
    if format != FORMAT {
        return Err(incompatible(format!(
            "format {format}; this server reads format {FORMAT}"
        )));
    }
    let len = header.take(1)?[0];
    let theirs = String::from_utf8_lossy(header.take(len.into())?);
    if theirs != writer {
        let theirs = super::cut(&theirs, 80);
        return Err(incompatible(format!("{theirs:?}; this one is {writer:?}")));
    }
    let hash = header.take(32)?;
    if blake3::hash(header.0).as_bytes() != hash {
        return Err(unreadable("its checksum does not match"));
    }
    let size = u64::from_le_bytes(header.take(8)?.try_into().expect("8 bytes"));
    let size = usize::try_from(size)
        .ok()
        .filter(|&s| s <= bounds.max_body())
        .ok_or_else(|| unreadable("larger than this server's limits allow"))?;
    let body = lz4_flex::block::decompress(header.0, size)
        .map_err(|e| FormatError::Unreadable(format!("cannot decompress: {e}")))?;
    let mut r = Reader(&body);
    if r.take(32)? != fingerprint {
        return Err(incompatible(
            "the same version, whose engine starts from other memory: replicas must run the same \
             engine with the same --allow"
                .into(),
        ));
    }
    let len = r.usize()?;
    if len > bounds.memory_bytes {
        return Err(unreadable("its memory is larger than the memory limit"));
    }
    let count = r.count(PAGE + 8)?;
    let mut pages = Vec::with_capacity(count);
    for _ in 0..count {
        pages.push((r.usize()?, r.take(PAGE)?));
    }
    let snapshot =
        Snapshot::from_pages(len, pages).ok_or_else(|| unreadable("its pages are out of place"))?;
    let files = match r.take(1)? {
        [0] => None,
        [1] => Some(r.files(bounds.files)?),
        _ => return Err(unreadable("bad file marker")),
    };
    if !r.0.is_empty() {
        return Err(unreadable("trailing bytes"));
    }
    Ok(State { snapshot, files })
}

fn put_u64(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u64).to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u64(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// Reads a body front to back; every read is checked against what is left.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        if n > self.0.len() {
            return Err(FormatError::Unreadable("truncated".into()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn usize(&mut self) -> Result<usize, FormatError> {
        let n = u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"));
        usize::try_from(n).map_err(|_| FormatError::Unreadable("a size out of range".into()))
    }

    /// A count of items of at least `min_size` bytes each, which the rest of the body can hold.
    fn count(&mut self, min_size: usize) -> Result<usize, FormatError> {
        let n = self.usize()?;
        if n > self.0.len() / min_size.max(1) {
            return Err(FormatError::Unreadable("truncated".into()));
        }
        Ok(n)
    }

    fn bytes(&mut self) -> Result<&'a [u8], FormatError> {
        let n = self.usize()?;
        self.take(n)
    }

    fn path(&mut self) -> Result<String, FormatError> {
        String::from_utf8(self.bytes()?.to_vec())
            .map_err(|_| FormatError::Unreadable("a path is not UTF-8".into()))
    }

    fn files(&mut self, limits: FileLimits) -> Result<(InputFiles, Folder), FormatError> {
        let bad =
            |what: &str, e: &dyn std::fmt::Debug| FormatError::Unreadable(format!("{what}: {e:?}"));
        let mut inputs = Vec::new();
        for _ in 0..self.count(16)? {
            inputs.push((self.path()?, self.bytes()?.to_vec()));
        }
        let inputs = InputFiles::new(inputs, limits).map_err(|e| bad("input files", &e))?;
        let mut out = Vec::new();
        for _ in 0..self.count(9)? {
            let path = self.path()?;
            let data = match self.take(1)? {
                [0] => None,
                [1] => Some(self.bytes()?.to_vec()),
                _ => return Err(FormatError::Unreadable("bad entry marker".into())),
            };
            out.push((path, data));
        }
        let folder = Folder::rebuild(limits.folder(), out).map_err(|e| bad("/out", &e))?;
        Ok((inputs, folder))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRINT: Fingerprint = [7; 32];
    const WRITER: &str = "safe-python-executor 9.9.9 (RustPython 0.6)";

    fn bounds() -> Bounds {
        Bounds {
            memory_bytes: 64 * PAGE,
            files: FileLimits::default(),
        }
    }

    fn sample() -> Vec<u8> {
        let pristine = vec![0u8; 8 * PAGE];
        let mut live = pristine.clone();
        live[2 * PAGE] = 1;
        live[5 * PAGE + 9] = 2;
        let mut snapshot = Snapshot::default();
        snapshot.capture(&live, &pristine, None);
        let inputs =
            InputFiles::new([("a/b.csv".into(), b"x,y".to_vec())], FileLimits::default()).unwrap();
        let folder = Folder::rebuild(
            FileLimits::default().folder(),
            [("d".into(), None), ("d/f.txt".into(), Some(b"hi".to_vec()))],
        )
        .unwrap();
        encode(WRITER, &PRINT, &snapshot, Some(&(inputs, folder)))
    }

    #[test]
    fn a_state_reads_back_as_written() {
        let state = decode(&sample(), WRITER, &PRINT, bounds()).unwrap();
        assert_eq!(state.snapshot.len, 8 * PAGE);
        assert_eq!(state.snapshot.offsets, [2 * PAGE, 5 * PAGE]);
        let page: Vec<_> = state.snapshot.pages().map(|(_, p)| p[9]).collect();
        assert_eq!(page, [0, 2]);
        let (inputs, folder) = state.files.unwrap();
        assert_eq!(inputs.len(), 1);
        let out: Vec<_> = folder
            .entries_by_path()
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(out, ["d", "d/f.txt"]);
        let empty = encode(WRITER, &PRINT, &Snapshot::default(), None);
        let state = decode(&empty, WRITER, &PRINT, bounds()).unwrap();
        assert!(state.snapshot.offsets.is_empty() && state.files.is_none());
    }

    #[test]
    fn a_blob_from_elsewhere_or_damaged_is_refused_with_a_reason() {
        let blob = sample();
        let refused = |blob: &[u8]| decode(blob, WRITER, &PRINT, bounds()).unwrap_err();
        assert!(matches!(
            decode(&blob, WRITER, &[8; 32], bounds()),
            Err(FormatError::Incompatible(_))
        ));
        assert!(matches!(
            refused(b"{\"x\": 1}"),
            FormatError::Incompatible(_)
        ));
        let mut other_format = blob.clone();
        other_format[8] = 2;
        assert!(matches!(
            refused(&other_format),
            FormatError::Incompatible(_)
        ));
        // Every truncation and every flipped byte after the format is caught, never a panic.
        for cut in 0..blob.len() {
            decode(&blob[..cut], WRITER, &PRINT, bounds()).unwrap_err();
        }
        // Another writer, or a damaged one, is named in the error.
        let said = decode(
            &blob,
            "safe-python-executor 1.0.0 (CPython)",
            &PRINT,
            bounds(),
        );
        assert!(said.unwrap_err().to_string().contains("9.9.9"));
        let header = 13 + WRITER.len();
        for i in 12..header {
            let mut flipped = blob.clone();
            flipped[i] ^= 0x55;
            decode(&flipped, WRITER, &PRINT, bounds()).unwrap_err();
        }
        for i in header..blob.len() {
            let mut flipped = blob.clone();
            flipped[i] ^= 0x55;
            assert!(
                matches!(refused(&flipped), FormatError::Unreadable(_)),
                "byte {i}"
            );
        }
        // A memory larger than this server's limit is refused before anything is restored.
        let small = Bounds {
            memory_bytes: 4 * PAGE,
            ..bounds()
        };
        assert!(decode(&blob, WRITER, &PRINT, small).is_err());
    }

    /// A blob whose checksum was recomputed (someone who can write to the store) still cannot
    /// claim sizes beyond the bounds, nor files beyond this server's file limits.
    #[test]
    fn a_forged_blob_stays_within_this_servers_limits() {
        let forge = |body: &[u8], size: u64| {
            let packed = lz4_flex::block::compress(body);
            let mut blob = MAGIC.to_vec();
            blob.extend_from_slice(&FORMAT.to_le_bytes());
            blob.push(WRITER.len() as u8);
            blob.extend_from_slice(WRITER.as_bytes());
            let mut hasher = blake3::Hasher::new();
            hasher.update(&size.to_le_bytes());
            hasher.update(&packed);
            blob.extend_from_slice(hasher.finalize().as_bytes());
            blob.extend_from_slice(&size.to_le_bytes());
            blob.extend_from_slice(&packed);
            blob
        };
        let mut body = PRINT.to_vec();
        put_u64(&mut body, 0);
        put_u64(&mut body, u32::MAX as usize);
        let err = decode(&forge(&body, body.len() as u64), WRITER, &PRINT, bounds()).unwrap_err();
        assert_eq!(err, FormatError::Unreadable("truncated".into()));
        let err = decode(&forge(&body, u64::MAX), WRITER, &PRINT, bounds()).unwrap_err();
        assert!(err.to_string().contains("limits"), "{err}");

        let mut body = PRINT.to_vec();
        put_u64(&mut body, 0);
        put_u64(&mut body, 0);
        body.push(1);
        put_u64(&mut body, 1);
        put_bytes(&mut body, b"../etc/passwd");
        put_bytes(&mut body, b"x");
        put_u64(&mut body, 0);
        let err = decode(&forge(&body, body.len() as u64), WRITER, &PRINT, bounds()).unwrap_err();
        assert!(err.to_string().contains("input files"), "{err}");
    }
}
