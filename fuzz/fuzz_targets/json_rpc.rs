#![no_main]
//! A client's lines, through the real server in process: `cargo fuzz run json_rpc`. The compiled
//! sandbox comes from the usual cache (`SAFE_PYTHON_CACHE_DIR`, else the user cache directory).
use std::sync::LazyLock;

use safe_python_executor::mcp::PythonServer;

static SERVER: LazyLock<PythonServer> = LazyLock::new(|| safe_python_fuzz::fuzz_server(None));

libfuzzer_sys::fuzz_target!(|data: &[u8]| safe_python_fuzz::json_rpc(&SERVER, data));
