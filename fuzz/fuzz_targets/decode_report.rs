#![no_main]
//! The guest's report as any bytes: `cargo fuzz run decode_report`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| safe_python_fuzz::decode_report(data));
