//! Where a guest's wasi-libc records that it has scanned the preopens, read off its module. Shared
//! by the host (the CPython engine's module file) and `build.rs` (the embedded guest, so that a
//! run never unpacks it to find out).

/// The address of the byte in which the guest's wasi-libc records that it has scanned the
/// preopens: the first byte `__wasilibc_populate_preopens` loads from a constant address (it
/// returns at once when the byte is set). `None` when the module has no such function or names.
pub fn scan_flag(wasm: &[u8]) -> Option<u32> {
    use wasmparser::{KnownCustom, Name, Operator, Parser, Payload, TypeRef};
    const FUNCTION: &str = "__wasilibc_populate_preopens";
    let mut imported = 0u32;
    let mut bodies = Vec::new();
    let mut index = None;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.ok()? {
            Payload::ImportSection(imports) => {
                for import in imports.into_imports() {
                    if let TypeRef::Func(_) = import.ok()?.ty {
                        imported += 1;
                    }
                }
            }
            Payload::CodeSectionEntry(body) => bodies.push(body),
            Payload::CustomSection(section) => {
                if let KnownCustom::Name(names) = section.as_known() {
                    for subsection in names.into_iter().flatten() {
                        if let Name::Function(map) = subsection {
                            index = map.into_iter().flatten().find(|n| n.name == FUNCTION);
                        }
                        if index.is_some() {
                            break;
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let body = bodies.get(index?.index.checked_sub(imported)? as usize)?;
    let mut ops = body.get_operators_reader().ok()?;
    let mut constant = None;
    // The flag is read within the function's first few instructions.
    for _ in 0..16 {
        match ops.read().ok()? {
            Operator::I32Const { value } => constant = Some(value as u32),
            Operator::I32Load8U { memarg } => {
                return constant?.checked_add(u32::try_from(memarg.offset).ok()?);
            }
            _ => constant = None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use crate::embedded;

    /// What a run takes from `build.rs` instead of unpacking the embedded guest matches the guest
    /// it unpacks.
    #[test]
    fn the_embedded_guest_unpacks_to_its_hash_and_scan_flag() {
        let wasm = embedded::wasm().unwrap();
        assert_eq!(format!("{:x}", Sha256::digest(&wasm)), embedded::SHA256);
        let flag = super::scan_flag(&wasm);
        assert!(flag.is_some());
        assert_eq!(embedded::scan_flag(), flag);
    }
}
