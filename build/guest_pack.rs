//! The form the guest artifact is committed and published in: crates.io refuses crates over 10 MiB,
//! and the 42 MB guest compresses to only 11.1 MB with `xz -9e`, because 8 MB of it is
//! RustPython's frozen standard library, already compressed with LZ4 (incompressible to xz).
//!
//! A pack is the guest with each such LZ4 block replaced by the bytes it decompresses to, which xz
//! then compresses well (9.1 MB in all). A block is replaced only when `lz4_flex` (the version the
//! guest was built with) compresses its contents back to exactly the same bytes, so unpacking
//! recompresses it and gets the original: `build.rs` checks the result against the SHA-256 in
//! `wasm/MANIFEST`. Blocks are found by the shape of a frozen-library entry (a name, then a length
//! and an LZ4 block); anything that only looks like one fails the round trip and stays as it is.
//!
//! Layout (integers little-endian): [`MAGIC`], the number of blocks (u32), then per block the
//! bytes copied before it (u64) and its decompressed length (u32), then the body.
//!
//! Shared by `build.rs` (unpack, to check it), `src/embedded.rs` (unpack, to compile it) and
//! `src/bin/pack-guest.rs` (pack, run by `scripts/guest.sh`).

/// Starts every pack: its format's name and version.
pub const MAGIC: &[u8; 16] = b"spx-guest-pack1\n";

/// The largest block worth replacing, decompressed; bounds what a damaged pack makes us allocate.
const MAX_RAW: usize = 64 << 20;

/// The longest frozen-module name looked for.
const MAX_NAME: usize = 200;

/// The most memory the LZMA decoder may take (its dictionary, set by `xz -9e`: 64 MiB).
const MAX_LZMA_KIB: u32 = 256 * 1024;

/// The guest from its committed form (`xz --format=lzma` around a pack).
#[allow(dead_code)] // pack-guest and the tests handle bare packs
pub fn unpack_committed(lzma: impl std::io::Read) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let mut pack = Vec::new();
    lzma_rust2::LzmaReader::new_mem_limit(lzma, MAX_LZMA_KIB, None)
        .and_then(|mut reader| reader.read_to_end(&mut pack))
        .map_err(|e| format!("cannot decompress it: {e}"))?;
    unpack(&pack)
}

fn u32_at(bytes: &[u8], at: usize) -> Option<usize> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?) as usize)
}

/// The LZ4 block of a frozen-library entry starting at `at` (`u32` name length, the name, `u32`
/// block length, the block), if there is one there that round-trips: `(start, length, contents)`.
fn frozen_block(wasm: &[u8], at: usize) -> Option<(usize, usize, Vec<u8>)> {
    let name_len = u32_at(wasm, at)?;
    if !(1..=MAX_NAME).contains(&name_len) {
        return None;
    }
    let name = wasm.get(at + 4..at + 4 + name_len)?;
    if !name
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
    {
        return None;
    }
    let block_len = u32_at(wasm, at + 4 + name_len)?;
    let start = at + 8 + name_len;
    let block = wasm.get(start..start.checked_add(block_len)?)?;
    // LZ4 expands at most 255-fold: a larger stated size is no block (and not worth allocating).
    let raw_len = u32_at(block, 0)?;
    if !(1..=MAX_RAW.min(block_len * 255)).contains(&raw_len) {
        return None;
    }
    let raw = lz4_flex::decompress_size_prepended(block).ok()?;
    (lz4_flex::compress_prepend_size(&raw) == block).then_some((start, block_len, raw))
}

/// Packs `wasm`: every frozen module's LZ4 block that round-trips is stored decompressed.
#[allow(dead_code)] // build.rs only unpacks
pub fn pack(wasm: &[u8]) -> Vec<u8> {
    let (mut table, mut body) = (Vec::new(), Vec::with_capacity(wasm.len() * 5 / 4));
    let (mut copied, mut at, mut count) = (0, 0, 0u32);
    while at < wasm.len() {
        match frozen_block(wasm, at) {
            Some((start, len, raw)) => {
                body.extend_from_slice(&wasm[copied..start]);
                table.extend_from_slice(&((start - copied) as u64).to_le_bytes());
                table.extend_from_slice(&(raw.len() as u32).to_le_bytes());
                body.extend_from_slice(&raw);
                count += 1;
                copied = start + len;
                at = copied;
            }
            None => at += 1,
        }
    }
    body.extend_from_slice(&wasm[copied..]);
    [&MAGIC[..], &count.to_le_bytes(), &table, &body].concat()
}

/// The guest a pack was made from. Errors say what is wrong with the pack.
pub fn unpack(pack: &[u8]) -> Result<Vec<u8>, String> {
    let rest = pack
        .strip_prefix(MAGIC)
        .ok_or("not a guest pack (wrong magic)")?;
    let count = u32_at(rest, 0).ok_or("truncated header")?;
    let table_len = count.checked_mul(12).ok_or("bad block count")?;
    let table = rest.get(4..4 + table_len).ok_or("truncated table")?;
    let mut body = &rest[4 + table_len..];
    let mut wasm = Vec::with_capacity(body.len());
    for entry in table.chunks_exact(12) {
        let gap = u64::from_le_bytes(entry[..8].try_into().unwrap());
        let gap = usize::try_from(gap).map_err(|_| "bad gap")?;
        let raw_len = u32_at(entry, 8).unwrap();
        let (before, after) = body
            .split_at_checked(gap)
            .ok_or("a block lies past the end")?;
        let (raw, after) = after
            .split_at_checked(raw_len)
            .ok_or("a block runs past the end")?;
        wasm.extend_from_slice(before);
        wasm.extend_from_slice(&lz4_flex::compress_prepend_size(raw));
        body = after;
    }
    wasm.extend_from_slice(body);
    Ok(wasm)
}
