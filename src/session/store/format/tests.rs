//! The stored format against damaged and forged blobs.

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
        let block = lz4_flex::block::compress(body);
        let mut packed = (block.len() as u32).to_le_bytes().to_vec();
        packed.extend_from_slice(&block);
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

/// A state larger than one block goes out in several, compressed on all cores, and comes back
/// whole; a blob cut short anywhere among its blocks is refused.
#[test]
fn a_large_state_spans_blocks_and_reads_back_whole() {
    let pages = 3 * CHUNK / PAGE + 7;
    let pristine = vec![0u8; pages * PAGE];
    let live: Vec<u8> = (0..pristine.len())
        .map(|i| (i / 3 % 251) as u8 ^ (i % PAGE == 0) as u8)
        .collect();
    let mut snapshot = Snapshot::default();
    snapshot.capture(&live, &pristine, None);
    let blob = encode(WRITER, &PRINT, &snapshot, None);
    let roomy = Bounds {
        memory_bytes: pages * PAGE,
        ..bounds()
    };
    let state = decode(&blob, WRITER, &PRINT, roomy).unwrap();
    let back: Vec<u8> = state
        .snapshot
        .pages()
        .flat_map(|(_, p)| p.to_vec())
        .collect();
    assert_eq!(back, live);
    for cut in [blob.len() - 1, blob.len() / 2, blob.len() / 3] {
        decode(&blob[..cut], WRITER, &PRINT, roomy).unwrap_err();
    }
}
