//! The form the guest is committed and published in (`build/guest_pack.rs`): a pack unpacks to
//! exactly what was packed, whatever looks like a frozen module but does not round-trip stays as
//! it is, and a damaged pack is an error, never a panic. (That the committed pack is the guest
//! `wasm/MANIFEST` describes, `build.rs` checks at every build.)

#[path = "../../build/guest_pack.rs"]
mod format;

use format::{MAGIC, pack, unpack};

/// A frozen-library entry as RustPython writes it: name, LZ4 block (size-prefixed), package flag.
fn frozen_entry(name: &str, block: &[u8]) -> Vec<u8> {
    let mut entry = (name.len() as u32).to_le_bytes().to_vec();
    entry.extend_from_slice(name.as_bytes());
    entry.extend_from_slice(&(block.len() as u32).to_le_bytes());
    entry.extend_from_slice(block);
    entry.push(0);
    entry
}

fn module_source(n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| format!("def f{i}(x):\n    return x * {i} + len('{i}')\n").into_bytes())
        .collect()
}

/// Bytes around and between two real blocks, and an entry whose "block" is not LZ4 at all.
fn guest_like() -> (Vec<u8>, Vec<u8>) {
    let source = module_source(400);
    let mut wasm = b"\0asm\x01\0\0\0".to_vec();
    wasm.extend(frozen_entry(
        "json.decoder",
        &lz4_flex::compress_prepend_size(&source),
    ));
    wasm.extend((0..=255u8).cycle().take(1000));
    wasm.extend(frozen_entry(
        "fake",
        &[200, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff],
    ));
    wasm.extend(frozen_entry(
        "os.path",
        &lz4_flex::compress_prepend_size(b"x = 1\n"),
    ));
    wasm.extend(b"tail");
    (wasm, source)
}

#[test]
fn a_pack_unpacks_to_what_was_packed_with_the_lz4_blocks_stored_decompressed() {
    let (wasm, source) = guest_like();
    let packed = pack(&wasm);
    assert!(packed.starts_with(MAGIC));
    assert_eq!(
        u32::from_le_bytes(packed[MAGIC.len()..][..4].try_into().unwrap()),
        2,
        "the two real blocks are replaced, the lookalike is not"
    );
    assert!(
        packed.windows(source.len()).any(|w| w == source),
        "the module's bytes are in the pack as they are"
    );
    assert_eq!(unpack(&packed).unwrap(), wasm);
    assert_eq!(unpack(&pack(b"no blocks here")).unwrap(), b"no blocks here");
}

#[test]
fn a_damaged_pack_is_an_error_not_a_panic() {
    let (wasm, _) = guest_like();
    let packed = pack(&wasm);
    assert!(unpack(b"not a pack").is_err());
    assert!(
        unpack(&packed[..MAGIC.len() + 2]).is_err(),
        "truncated header"
    );
    assert!(
        unpack(&packed[..MAGIC.len() + 10]).is_err(),
        "truncated table"
    );
    let mut huge_gap = packed.clone();
    huge_gap[MAGIC.len() + 4..][..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(unpack(&huge_gap).is_err(), "a block past the end");
    let mut huge_count = packed.clone();
    huge_count[MAGIC.len()..][..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(
        unpack(&huge_count).is_err(),
        "more blocks than the table holds"
    );
    // Cut anywhere: an error or some bytes, never a panic.
    for cut in 0..packed.len() {
        let _ = unpack(&packed[..cut]);
    }
}
