#![no_main]
//! `run_python`'s arguments as any JSON: `cargo fuzz run run_python_args`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| safe_python_fuzz::run_python_args(data));
