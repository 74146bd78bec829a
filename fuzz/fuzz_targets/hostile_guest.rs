#![no_main]
//! A guest calling the host's protocol functions with chosen pointers, lengths and bytes:
//! `cargo fuzz run hostile_guest`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    safe_python_fuzz::hostile_guest(data);
});
