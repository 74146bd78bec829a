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
//! the size of the uncompressed body (u64), then the body in LZ4 blocks of [`CHUNK`] bytes (the
//! last one shorter), each after its compressed size (u32), compressed and decompressed on all
//! cores: this is on the path of every call that changes a session. The body: the
//! fingerprint, the memory's size, its saved pages (offset and [`PAGE`] bytes each), the input
//! files and the `/out` entries. Integers are little-endian.

// Used by the store's client; compiled (and tested) without it too.
#![cfg_attr(not(feature = "store"), allow(dead_code))]

use rayon::prelude::*;

use crate::sandbox::files::{FileLimits, InputFiles};
use crate::sandbox::pagemap::PAGE;
use crate::sandbox::snapshot::Snapshot;
use crate::vfs::Folder;

const MAGIC: &[u8; 8] = b"SPYSESS\0";
/// Bumped whenever the layout changes: a blob of another version is refused, not guessed at.
pub const FORMAT: u32 = 1;
/// Bytes of the body in one LZ4 block.
const CHUNK: usize = 256 << 10;
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
    let blocks: Vec<Vec<u8>> = body
        .par_chunks(CHUNK)
        .map(lz4_flex::block::compress)
        .collect();
    let mut packed = Vec::with_capacity(body.len() / 2);
    for block in blocks {
        packed.extend_from_slice(&(block.len() as u32).to_le_bytes());
        packed.extend_from_slice(&block);
    }
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
    let mut blocks = Vec::with_capacity(size.div_ceil(CHUNK));
    for start in (0..size).step_by(CHUNK) {
        let packed = u32::from_le_bytes(header.take(4)?.try_into().expect("4 bytes"));
        blocks.push((header.take(packed as usize)?, CHUNK.min(size - start)));
    }
    if !header.0.is_empty() {
        return Err(unreadable("trailing bytes"));
    }
    let mut body = Vec::with_capacity(size);
    let blocks: Vec<_> = blocks
        .par_iter()
        .map(|&(packed, len)| lz4_flex::block::decompress(packed, len).map(|raw| (raw, len)))
        .collect();
    for block in blocks {
        match block {
            Ok((raw, len)) if raw.len() == len => body.extend_from_slice(&raw),
            Ok(_) => return Err(unreadable("a block is shorter than it says")),
            Err(e) => return Err(FormatError::Unreadable(format!("cannot decompress: {e}"))),
        }
    }
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
mod tests;
