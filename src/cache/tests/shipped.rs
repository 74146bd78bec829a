//! A shipped compiled guest loads only when it is this guest's, compiled by this wasmtime under
//! this configuration for a CPU this machine has; anything else is refused, never run.

use super::super::shipped::{FILE_NAME, Unusable, load, precompile};
use super::super::trust::Distrust;
use super::support::{EMPTY_MODULE, Scratch};
use crate::engine::{self, Features, Metering};
use std::fs;
use wasmtime::Engine;

const GUEST: &str = "9180607099441118aa6b7e1c6b9d0f4f1f0e2d7c9a8b6c5d4e3f2a1b0c9d8e7f";
const OTHER_GUEST: &str = "0000000099441118aa6b7e1c6b9d0f4f1f0e2d7c9a8b6c5d4e3f2a1b0c9d8e7f";

/// The triple of this machine's target, which `precompile` compiles for at baseline CPU.
fn host() -> String {
    let os = match std::env::consts::OS {
        "macos" => "apple-darwin",
        "windows" => "pc-windows-gnu",
        _ => "unknown-linux-gnu",
    };
    format!("{}-{os}", std::env::consts::ARCH)
}

/// An architecture this machine cannot run.
fn foreign() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "x86_64-unknown-linux-gnu",
        _ => "aarch64-unknown-linux-gnu",
    }
}

fn metered() -> Engine {
    engine::new(Features::default(), Metering::Fuel).unwrap()
}

/// Writes a shipped module compiled as `Sandbox::precompile` does, and tries to load it.
fn ship(
    name: &str,
    target: &str,
    compiled_for: &str,
    engine: &Engine,
) -> Result<Option<wasmtime::Module>, Unusable> {
    let scratch = Scratch::new(name);
    fs::create_dir_all(scratch.path()).unwrap();
    let config = engine::config_for(Features::default(), Metering::Fuel);
    let artifact = precompile(config, target, EMPTY_MODULE, compiled_for).unwrap();
    let path = scratch.path().join(FILE_NAME);
    fs::write(&path, artifact).unwrap();
    load(engine, &path, GUEST)
}

#[test]
fn a_module_compiled_for_this_target_and_guest_loads_on_a_native_engine() {
    let module = ship("shipped-ok", &host(), GUEST, &metered()).unwrap();
    assert!(module.is_some(), "the shipped module was not loaded");
    // The pooled engine the RustPython sandbox uses runs the same compiled code.
    let pooled = engine::pooled(Features::default(), Metering::Fuel, 2).unwrap();
    assert!(
        ship("shipped-pooled", &host(), GUEST, &pooled)
            .unwrap()
            .is_some()
    );
}

#[test]
fn a_module_of_another_guest_is_refused() {
    let refused = ship("shipped-other", &host(), OTHER_GUEST, &metered());
    assert!(matches!(refused, Err(Unusable::OtherGuest)), "{refused:?}");
}

#[test]
fn a_module_for_another_architecture_is_refused_by_wasmtime() {
    let refused = ship("shipped-foreign", foreign(), GUEST, &metered());
    assert!(
        matches!(refused, Err(Unusable::Refused(Distrust::Deserialize(_)))),
        "{refused:?}"
    );
}

#[test]
fn a_module_compiled_under_another_configuration_is_refused_by_wasmtime() {
    // `--fuel off`: no fuel checks compiled in, epoch checks instead.
    let unmetered = engine::new(Features::default(), Metering::Off).unwrap();
    let refused = ship("shipped-unmetered", &host(), GUEST, &unmetered);
    assert!(
        matches!(refused, Err(Unusable::Refused(Distrust::Deserialize(_)))),
        "{refused:?}"
    );
}

#[test]
fn a_file_without_the_trailer_or_truncated_is_refused_and_none_is_no_module() {
    let scratch = Scratch::new("shipped-bare");
    fs::create_dir_all(scratch.path()).unwrap();
    let engine = metered();
    let path = scratch.path().join(FILE_NAME);
    assert!(matches!(load(&engine, &path, GUEST), Ok(None)));
    // A plain wasmtime artifact, as `Module::serialize` writes it.
    let bare = engine.precompile_module(EMPTY_MODULE).unwrap();
    fs::write(&path, &bare).unwrap();
    let refused = load(&engine, &path, GUEST);
    assert!(matches!(refused, Err(Unusable::NoTrailer)), "{refused:?}");
    fs::write(&path, b"spx-shp1").unwrap();
    let refused = load(&engine, &path, GUEST);
    assert!(matches!(refused, Err(Unusable::NoTrailer)), "{refused:?}");
    // The trailer of this guest on bytes that are no artifact.
    fs::write(
        &path,
        [&b"not a module"[..], GUEST.as_bytes(), b"spx-shp1"].concat(),
    )
    .unwrap();
    let refused = load(&engine, &path, GUEST);
    assert!(
        matches!(refused, Err(Unusable::Refused(Distrust::Deserialize(_)))),
        "{refused:?}"
    );
}

#[test]
fn precompiling_refuses_what_is_not_a_sha256() {
    let config = engine::config_for(Features::default(), Metering::Fuel);
    assert!(precompile(config, &host(), EMPTY_MODULE, "abc").is_err());
}
