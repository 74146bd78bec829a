//! An entry that wasmtime cannot map (as under wine before the fix in [`crate::cache::load`]) is
//! loaded from memory, never compiled again, and never loaded unchecked.

use super::super::load::tests::refuse_mapping;
use super::super::*;
use super::support::*;
use crate::engine;
use std::fs;

#[test]
fn an_entry_that_cannot_be_mapped_is_loaded_from_memory_and_says_why() {
    let engine = engine::new(Default::default(), Default::default()).unwrap();
    let scratch = Scratch::new("unmapped");
    stored(&engine, scratch.path(), GUEST);
    let mapped = attempt(&engine, scratch.path(), GUEST);
    let copied = refuse_mapping(|| attempt(&engine, scratch.path(), GUEST));
    for (how, loaded) in [("mapped", &mapped), ("copied", &copied)] {
        assert!(
            matches!(loaded.prepared, Prepared::Loaded(_)),
            "{how}: {}",
            loaded.log
        );
        assert_eq!(loaded.compiles, 0, "{how}: {}", loaded.log);
        assert_eq!(loaded.warnings, "", "{how}");
    }
    assert!(!mapped.log.contains("cannot map"), "{}", mapped.log);
    assert!(
        copied
            .log
            .contains("cannot map the compiled module (mapping refused by a test)")
            && copied.log.contains("loading a copy from memory"),
        "{}",
        copied.log
    );
}

/// The copy is made only of bytes whose MAC holds: a damaged entry is refused as when mapped.
#[test]
fn an_unmappable_damaged_entry_is_refused_then_replaced() {
    let engine = engine::new(Default::default(), Default::default()).unwrap();
    let scratch = Scratch::new("unmapped-damaged");
    let entry = stored(&engine, scratch.path(), GUEST);
    let mut bytes = fs::read(&entry).unwrap();
    bytes[0] ^= 1;
    fs::write(&entry, bytes).unwrap();
    let refused = refuse_mapping(|| attempt(&engine, scratch.path(), GUEST));
    assert_eq!(refused.compiles, 1, "{}", refused.log);
    assert!(
        refused.warnings.contains("MAC does not match") && !refused.log.contains("cannot map"),
        "{}",
        refused.log
    );
    let again = refuse_mapping(|| attempt(&engine, scratch.path(), GUEST));
    assert!(
        matches!(again.prepared, Prepared::Loaded(_)) && again.compiles == 0,
        "{}",
        again.log
    );
}
