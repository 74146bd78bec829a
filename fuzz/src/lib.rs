//! The bodies of the fuzz targets: everything on the host side that takes untrusted bytes.
//!
//! - [`run_python_args`]: the arguments of a `run_python` call, as any JSON a client may send;
//! - [`json_rpc`]: the lines a client writes to the server, driven through the real
//!   [`PythonServer`] over an in-process pipe (the same codec as stdio);
//! - [`decode_report`]: the report a guest hands back at the end of a run;
//! - [`hostile_guest`]: a guest that calls the host functions of the protocol with chosen pointers,
//!   lengths and bytes, standing for an interpreter taken over by the code it runs.
//!
//! Each body panics when the host misbehaves (a crash, a hang, a wrong answer) and returns otherwise.
//! The cargo-fuzz targets in `fuzz_targets/` call them, and so does `tests/it/fuzz_smoke.rs`, which
//! replays the committed seeds under `fuzz/seeds/` and mutations of them in the normal test suite:
//! one body, two drivers.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use clap::Parser;
use rmcp::ServiceExt;
use rmcp::handler::server::tool::parse_json_object;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonObject, JsonRpcMessage, RequestId,
    ServerJsonRpcMessage,
};
use safe_python_executor::mcp::{self, Args, PythonServer, RunPythonArgs};
use safe_python_executor::session::registry::SessionRequest;
use safe_python_executor::{ImportPolicy, Limits, Outcome, RunOptions, RunResult, Sandbox};
use safe_python_protocol::{self as protocol, Report};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// One runtime for every input: building a runtime per input would dominate the time spent.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    });
    &RUNTIME
}

/// The input schema of `run_python`, as clients are given it in `tools/list`.
pub fn run_python_schema() -> Arc<JsonObject> {
    mcp::input_schema()
}

/// Decodes `run_python`'s arguments as the server does: rmcp's tool router, then the tool's check.
pub fn decode_arguments(arguments: Option<JsonObject>) -> Result<RunPythonArgs, String> {
    let args: RunPythonArgs =
        parse_json_object(arguments.unwrap_or_default()).map_err(|e| e.message.into_owned())?;
    args.check()?;
    Ok(args)
}

/// Whether a value of JSON type `ty` (a JSON Schema type name) admits `value`.
fn has_type(ty: &str, value: &Value) -> bool {
    match ty {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "number" => value.is_number(),
        "integer" => value.as_f64().is_some_and(|n| n.fract() == 0.0),
        other => panic!("the oracle does not know the JSON Schema type {other:?}"),
    }
}

/// Whether `schema`, the schema of one argument, admits `value` as argument decoding does: by
/// type. A `pattern` is the form of a value that the tool itself checks after decoding (see
/// [`run_python_args`]). A keyword the oracle does not know fails here, so that a new constraint is
/// taught to it rather than passed over.
fn admits(name: &str, schema: &Value, value: &Value) -> bool {
    let mut admitted = true;
    for (keyword, constraint) in schema
        .as_object()
        .expect("an argument's schema is an object")
    {
        match keyword.as_str() {
            "type" => {
                admitted &= match constraint {
                    Value::String(ty) => has_type(ty, value),
                    other => panic!("{name}: a type that is not one name: {other}"),
                }
            }
            "anyOf" => {
                admitted &= constraint
                    .as_array()
                    .expect("anyOf lists schemas")
                    .iter()
                    .any(|branch| admits(name, branch, value))
            }
            "minimum" => {
                admitted &= value
                    .as_f64()
                    .is_none_or(|n| Some(n) >= constraint.as_f64())
            }
            "maximum" => {
                admitted &= value
                    .as_f64()
                    .is_none_or(|n| Some(n) <= constraint.as_f64())
            }
            "enum" => admitted &= constraint.as_array().is_some_and(|vs| vs.contains(value)),
            // An object's members (the `files` map and its `{"base64"}` values); they say nothing
            // of values that are not objects.
            "properties" | "required" | "additionalProperties" => {
                if let (Some(schema), Some(members)) = (schema.as_object(), value.as_object()) {
                    admitted &= admits_members(name, schema, members);
                }
            }
            "const" => admitted &= constraint == value,
            "pattern" | "format" | "description" | "default" | "title" | "examples" => {}
            other => panic!("{name}: the oracle does not know the keyword {other:?}: {schema}"),
        }
    }
    admitted
}

/// Whether the members of an object meet `schema`'s `properties`, `required` and
/// `additionalProperties`.
fn admits_members(name: &str, schema: &JsonObject, members: &JsonObject) -> bool {
    let properties = schema.get("properties").and_then(Value::as_object);
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    required
        .iter()
        .all(|r| members.contains_key(r.as_str().expect("a property name")))
        && members.iter().all(|(key, member)| {
            match (
                properties.and_then(|p| p.get(key)),
                schema.get("additionalProperties"),
            ) {
                (Some(member_schema), _) => admits(name, member_schema, member),
                (None, None | Some(Value::Bool(true))) => true,
                (None, Some(Value::Bool(false))) => false,
                (None, Some(other)) => admits(name, other, member),
            }
        })
}

/// Whether `arguments` meet `schema`, the tool's input schema: every required argument given, none
/// that it does not list, each of a type and in a range it admits.
pub fn conforms(schema: &JsonObject, arguments: &JsonObject) -> bool {
    assert!(
        schema["properties"].is_object(),
        "the schema lists the arguments"
    );
    for (keyword, value) in schema {
        match keyword.as_str() {
            "$schema" | "title" | "description" | "properties" | "required" => {}
            "type" => assert_eq!(value, "object", "the arguments are an object"),
            "additionalProperties" => assert_eq!(value, false, "unknown arguments are refused"),
            other => panic!("the oracle does not know the keyword {other:?}: {value}"),
        }
    }
    admits_members("arguments", schema, arguments)
}

/// `run_python`'s arguments: any JSON object is either accepted or refused with an error, and
/// anything else is not an argument object at all. What is accepted is read from the tool's real
/// input schema ([`run_python_schema`]), so a new argument is known here the day it is added: an
/// object that meets the schema, less the one rule a schema does not carry (`reset` needs a
/// `session`). An accepted `session` reaches a session only in the form the schema's pattern gives
/// (`"new"`, or a handle); any other is refused, saying how to start one.
pub fn run_python_args(data: &[u8]) {
    static SCHEMA: LazyLock<Arc<JsonObject>> = LazyLock::new(run_python_schema);
    static SESSION_FORM: LazyLock<regex_lite::Regex> = LazyLock::new(|| {
        let pattern = SCHEMA["properties"]["session"]["anyOf"]
            .as_array()
            .and_then(|branches| branches.iter().find_map(|b| b["pattern"].as_str()))
            .expect("the schema gives the form of a session value");
        regex_lite::Regex::new(pattern).expect("the schema's pattern is a regular expression")
    });
    let arguments = match serde_json::from_slice::<Value>(data) {
        Ok(Value::Object(map)) => Some(map),
        Ok(Value::Null) => None,
        _ => return,
    };
    let given = arguments.clone().unwrap_or_default();
    let session = given.get("session").and_then(Value::as_str);
    let reset = given.get("reset") == Some(&Value::Bool(true));
    let well_formed = conforms(&SCHEMA, &given) && !(reset && session.is_none());
    match decode_arguments(arguments) {
        Ok(args) => {
            assert!(well_formed, "accepted {given:?}");
            assert_eq!(Some(args.code.as_str()), given["code"].as_str());
            assert_eq!(args.session.as_deref(), session);
            assert_eq!(args.reset, reset);
            if let Some(session) = &args.session {
                let form = SESSION_FORM.is_match(session);
                match SessionRequest::parse(session) {
                    Ok(_) => assert!(form, "{session:?} was taken"),
                    Err(e) => {
                        assert!(!form, "{session:?}: {e}");
                        assert!(e.to_string().contains("session: \"new\""), "{e}");
                    }
                }
            }
        }
        Err(e) => assert!(!well_formed, "refused {given:?}: {e:?}"),
    }
}

/// The guest's report: whatever the bytes, an outcome; a report that parses is never a guest fault.
pub fn decode_report(data: &[u8]) {
    let outcome = safe_python_executor::outcome::decode_report(data);
    let parsed = serde_json::from_slice::<Report>(data).is_ok();
    assert_eq!(
        parsed,
        !matches!(outcome, Outcome::Trapped { .. }),
        "{outcome:?}"
    );
}

/// Limits of a run started by fuzzed input: small, so that code the fuzzer stumbles on (an endless
/// loop) costs milliseconds, not seconds.
fn fuzz_limits() -> Limits {
    Limits {
        timeout: Duration::from_secs(1),
        fuel: 50_000_000,
        memory_bytes: 64 << 20,
        max_output_bytes: 64 << 10,
    }
}

/// A server for [`json_rpc`], with [`fuzz_limits`]; `cache_dir` as for `--cache-dir`.
pub fn fuzz_server(cache_dir: Option<PathBuf>) -> PythonServer {
    let limits = fuzz_limits();
    let mut argv: Vec<OsString> = [
        "safe-python-mcp".to_owned(),
        format!("--timeout={}", limits.timeout.as_secs_f64()),
        format!("--memory={}", limits.memory_bytes >> 20),
        format!("--fuel={}", limits.fuel),
        format!("--max-output={}", limits.max_output_bytes),
        "--workers=2".to_owned(),
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    if let Some(dir) = cache_dir {
        argv.push("--cache-dir".into());
        argv.push(dir.into());
    }
    let args = Args::try_parse_from(argv).expect("the fuzz server's flags parse");
    let sessions = args.sessions(None).expect("sessions in memory");
    PythonServer::start(&args, None, sessions)
}

/// How long one session of fuzzed lines may take: past this the server hung. A call is stopped
/// after [`fuzz_limits`]'s second, and rmcp gives in-flight calls 5 s after the client goes away.
const SESSION_DEADLINE: Duration = Duration::from_secs(15);

/// How long the client waits for its answers before it closes anyway (a request the input also
/// cancels is never answered, by design).
const ANSWER_WAIT: Duration = Duration::from_secs(3);

/// The requests in `data` that the server will decode, less those the input cancels: what a client
/// would wait for before it hangs up. The `tools/call` arguments among them also go through the
/// argument decoder directly, since the server only gets to them after a valid handshake.
fn expected_answers(data: &[u8]) -> HashSet<RequestId> {
    let mut ids = HashSet::new();
    let mut cancelled = Vec::new();
    for line in data.split(|b| *b == b'\n') {
        match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
            Ok(JsonRpcMessage::Request(request)) => {
                if let ClientRequest::CallToolRequest(call) = &request.request {
                    let _ = decode_arguments(call.params.arguments.clone());
                }
                ids.insert(request.id);
            }
            Ok(JsonRpcMessage::Notification(notification)) => {
                if let ClientNotification::CancelledNotification(c) = notification.notification {
                    cancelled.extend(c.params.request_id);
                }
            }
            _ => {}
        }
    }
    for id in &cancelled {
        ids.remove(id);
    }
    ids
}

/// The bytes a client writes, through the real server over an in-process pipe (the codec stdio
/// uses): the server writes well-formed JSON-RPC only, never panics (its task would end in a
/// `JoinError`) and ends the session once the client, having had its answers, closes its side.
///
/// The client waits for its answers because rmcp, once the client has gone, holds a call that is
/// still sending notifications for its full 5 s grace: closing at once would make every input with
/// a streaming call cost 5 s.
pub fn json_rpc(server: &PythonServer, data: &[u8]) {
    let mut waiting = expected_answers(data);
    let server = server.clone();
    let session = runtime().block_on(async move {
        let (client, server_side) = tokio::io::duplex(64 << 10);
        let (from_server, mut to_server) = tokio::io::split(client);
        let serving = tokio::spawn(async move {
            match server.serve(tokio::io::split(server_side)).await {
                Ok(running) => Some(running.waiting().await),
                // A session whose handshake failed: refused, not crashed.
                Err(_) => None,
            }
        });
        let (answered, all_answered) = tokio::sync::oneshot::channel::<()>();
        let writing = async move {
            // The server may hang up first (a bad handshake); then the rest is not heard.
            let _ = to_server.write_all(data).await;
            let _ = tokio::time::timeout(ANSWER_WAIT, all_answered).await;
            let _ = to_server.shutdown().await;
        };
        let reading = async move {
            let mut answered = Some(answered);
            let mut lines = BufReader::new(from_server).lines();
            let mut out = Vec::new();
            loop {
                if waiting.is_empty()
                    && let Some(answered) = answered.take()
                {
                    let _ = answered.send(());
                }
                let Some(line) = lines.next_line().await.expect("the server writes UTF-8") else {
                    break;
                };
                let message =
                    serde_json::from_str::<ServerJsonRpcMessage>(&line).unwrap_or_else(|e| {
                        panic!("the server wrote a line that is not JSON-RPC ({e}): {line:?}")
                    });
                match &message {
                    JsonRpcMessage::Response(r) => waiting.remove(&r.id),
                    JsonRpcMessage::Error(e) => e.id.as_ref().is_some_and(|id| waiting.remove(id)),
                    _ => false,
                };
                out.push(message);
            }
            out
        };
        let session = async {
            let ((), out) = tokio::join!(writing, reading);
            (out, serving.await)
        };
        tokio::time::timeout(SESSION_DEADLINE, session).await
    });
    let (_messages, ended) = session.expect("the server hung: the session did not end");
    if let Some(Err(e)) = ended.expect("the server's task panicked") {
        panic!("the serve loop panicked: {e}");
    }
}

/// The hostile guest's instructions: name, operand count, and body (operands are `$a`, `$b`, `$c`).
/// An instruction is one byte whose low four bits index this table; 13 to 15 end the program.
/// Each operand is one byte: below 0x80 that number, below 0xc0 a pick from [`INTERESTING`], and
/// otherwise the four bytes that follow, little-endian. A program that runs out of bytes ends.
/// The seeds in `fuzz/seeds/hostile_guest/` are programs in this encoding, named for what they do.
const OPS: [(&str, usize, &str); 13] = [
    ("request_len", 0, "(drop (call $request_len))"),
    ("request_read", 1, "(call $request_read (local.get $a))"),
    (
        "import_allowed",
        2,
        "(drop (call $import_allowed (local.get $a) (local.get $b)))",
    ),
    ("report", 2, "(call $report (local.get $a) (local.get $b))"),
    (
        "report a well-formed report",
        0,
        "(call $report (i32.const {VALID_REPORT_AT}) (i32.const {VALID_REPORT_LEN}))",
    ),
    ("memory.grow", 1, "(drop (memory.grow (local.get $a)))"),
    ("i32.store", 2, "(i32.store (local.get $a) (local.get $b))"),
    (
        "fd_write(fd, &[iovec { ptr, len }])",
        3,
        "(i32.store (i32.const {IOVEC_AT}) (local.get $b))
         (i32.store (i32.const {IOVEC_LEN_AT}) (local.get $c))
         (drop (call $fd_write (local.get $a) (i32.const {IOVEC_AT}) (i32.const 1) (i32.const {WRITTEN_AT})))",
    ),
    ("proc_exit", 1, "(call $proc_exit (local.get $a))"),
    ("unreachable", 0, "unreachable"),
    ("an endless loop", 0, "(loop $spin (br $spin))"),
    ("endless recursion", 0, "(call $recurse)"),
    ("nop", 0, "nop"),
];

/// Scratch space for `fd_write`'s iovec and its result.
const IOVEC_AT: i32 = 256;
/// Where a well-formed report is kept.
const VALID_REPORT_AT: i32 = 512;
const VALID_REPORT: &str = r#"{"result":"42","error":null}"#;
/// Where the guest decodes its program; a program can point operands at its own bytes here.
const PROGRAM_AT: i32 = 4096;
/// Where the guest reads its request (the program arrives hex-encoded in the request's code).
const REQUEST_AT: i32 = 65536;
/// Where the table of [`INTERESTING`] operands is kept.
const TABLE_AT: i32 = 1024;

/// Operand values a fuzzer would take long to guess: edges of memory and of the host's bounds.
const INTERESTING: [i32; 12] = [
    -1,
    i32::MAX,
    i32::MIN,
    65535,
    65536,
    PROGRAM_AT,
    VALID_REPORT_AT,
    REQUEST_AT,
    protocol::MAX_MODULE_NAME_BYTES as i32,
    protocol::MAX_MODULE_NAME_BYTES as i32 + 1,
    protocol::MAX_REPORT_BYTES as i32,
    protocol::MAX_REPORT_BYTES as i32 + 1,
];

/// Bytes as a WAT string literal.
fn wat_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\{b:02x}")).collect()
}

/// The hostile guest: a module that links against this host's protocol (the import names come from
/// the protocol crate, so a new protocol version needs no change here) and interprets the program
/// it finds in its request's code, one instruction of [`OPS`] after the other.
///
/// It is compiled once and given each input as a run's code, so an input costs a run, not a
/// compilation: the input is sent as `@` followed by two letters `A`..`P` per byte, which JSON
/// leaves as they are and the guest decodes to [`PROGRAM_AT`].
pub fn hostile_guest_wat() -> String {
    let dispatch: String = OPS
        .iter()
        .enumerate()
        .map(|(code, (name, operands, body))| {
            let read: String = ["$a", "$b", "$c"][..*operands]
                .iter()
                .map(|local| {
                    format!("(local.set {local} (call $operand)) (br_if $done (global.get $eof)) ")
                })
                .collect();
            let body = body
                .replace("{VALID_REPORT_AT}", &VALID_REPORT_AT.to_string())
                .replace("{VALID_REPORT_LEN}", &VALID_REPORT.len().to_string())
                .replace("{IOVEC_AT}", &IOVEC_AT.to_string())
                .replace("{IOVEC_LEN_AT}", &(IOVEC_AT + 4).to_string())
                .replace("{WRITTEN_AT}", &(IOVEC_AT + 8).to_string());
            format!(
                "\n      ;; {code}: {name}\n      (if (i32.eq (local.get $op) (i32.const {code})) (then {read}{body} (br $next)))"
            )
        })
        .collect();
    let table: Vec<u8> = INTERESTING.iter().flat_map(|v| v.to_le_bytes()).collect();
    let m = protocol::IMPORT_MODULE;
    format!(
        r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (import "{m}" "{request_len}" (func $request_len (result i32)))
  (import "{m}" "{request_read}" (func $request_read (param i32)))
  (import "{m}" "{import_allowed}" (func $import_allowed (param i32 i32) (result i32)))
  (import "{m}" "{report}" (func $report (param i32 i32)))
  (memory (export "memory") 3)
  (data (i32.const {VALID_REPORT_AT}) "{valid}")
  (data (i32.const {TABLE_AT}) "{table}")
  (global $pc (mut i32) (i32.const 0))
  (global $end (mut i32) (i32.const 0))
  (global $eof (mut i32) (i32.const 0))
  (func $recurse (call $recurse))

  ;; The next operand of the program, or $eof set when there is none.
  (func $operand (result i32)
    (local $byte i32)
    (if (i32.ge_u (global.get $pc) (global.get $end))
      (then (global.set $eof (i32.const 1)) (return (i32.const 0))))
    (local.set $byte (i32.load8_u (global.get $pc)))
    (global.set $pc (i32.add (global.get $pc) (i32.const 1)))
    (if (i32.lt_u (local.get $byte) (i32.const 0x80)) (then (return (local.get $byte))))
    (if (i32.lt_u (local.get $byte) (i32.const 0xc0))
      (then (return (i32.load (i32.add (i32.const {TABLE_AT})
        (i32.shl (i32.rem_u (i32.sub (local.get $byte) (i32.const 0x80)) (i32.const {table_len})) (i32.const 2)))))))
    (if (i32.gt_u (i32.add (global.get $pc) (i32.const 4)) (global.get $end))
      (then (global.set $eof (i32.const 1)) (return (i32.const 0))))
    (global.set $pc (i32.add (global.get $pc) (i32.const 4)))
    (i32.load (i32.sub (global.get $pc) (i32.const 4))))

  ;; Decodes the letters after the first `@` of the request into the program.
  (func $load_program
    (local $at i32) (local $stop i32) (local $hi i32) (local $lo i32)
    (local.set $at (i32.const {REQUEST_AT}))
    (local.set $stop (i32.add (i32.const {REQUEST_AT}) (call $request_len)))
    (call $request_read (i32.const {REQUEST_AT}))
    (block $found (loop $scan
      (br_if $found (i32.ge_u (local.get $at) (local.get $stop)))
      (local.set $at (i32.add (local.get $at) (i32.const 1)))
      (br_if $found (i32.eq (i32.load8_u (i32.sub (local.get $at) (i32.const 1))) (i32.const 0x40)))
      (br $scan)))
    (global.set $pc (i32.const {PROGRAM_AT}))
    (global.set $end (i32.const {PROGRAM_AT}))
    (block $decoded (loop $pair
      (br_if $decoded (i32.ge_u (i32.add (local.get $at) (i32.const 1)) (local.get $stop)))
      (local.set $hi (i32.sub (i32.load8_u (local.get $at)) (i32.const 0x41)))
      (local.set $lo (i32.sub (i32.load8_u (i32.add (local.get $at) (i32.const 1))) (i32.const 0x41)))
      (br_if $decoded (i32.gt_u (i32.or (local.get $hi) (local.get $lo)) (i32.const 15)))
      (i32.store8 (global.get $end) (i32.or (i32.shl (local.get $hi) (i32.const 4)) (local.get $lo)))
      (global.set $end (i32.add (global.get $end) (i32.const 1)))
      (local.set $at (i32.add (local.get $at) (i32.const 2)))
      (br $pair))))

  (func (export "{run}")
    (local $op i32) (local $a i32) (local $b i32) (local $c i32)
    (call $load_program)
    (block $done (loop $next
      (br_if $done (i32.ge_u (global.get $pc) (global.get $end)))
      (local.set $op (i32.and (i32.load8_u (global.get $pc)) (i32.const 15)))
      (global.set $pc (i32.add (global.get $pc) (i32.const 1)))
      {dispatch}
      ;; 13 to 15: the end of the program.
      )))
)"#,
        request_len = protocol::imports::REQUEST_LEN,
        request_read = protocol::imports::REQUEST_READ,
        import_allowed = protocol::imports::IMPORT_ALLOWED,
        report = protocol::imports::REPORT,
        run = protocol::exports::RUN,
        valid = wat_bytes(VALID_REPORT.as_bytes()),
        table = wat_bytes(&table),
        table_len = INTERESTING.len(),
    )
}

/// The code of a run that hands `data` to the hostile guest as its program.
fn hostile_program(data: &[u8]) -> String {
    std::iter::once('@')
        .chain(
            data.iter()
                .flat_map(|b| [b >> 4, b & 15].map(|nibble| char::from(b'A' + nibble))),
        )
        .collect()
}

/// The hostile guest, compiled once.
fn hostile_sandbox() -> &'static Sandbox {
    static SANDBOX: LazyLock<Sandbox> = LazyLock::new(|| {
        let wasm = wat::parse_str(hostile_guest_wat()).expect("the hostile guest is valid");
        Sandbox::with_guest(&wasm).expect("the host accepts a guest of its protocol")
    });
    &SANDBOX
}

/// Runs `data` as the hostile guest's program: the host must come back with an outcome within the
/// timeout plus a second, whatever the guest did. Returns the result for tests to look into.
pub fn hostile_guest(data: &[u8]) -> RunResult {
    let options = RunOptions {
        // Its endless loops burn the whole budget: keep that to a fraction of a millisecond.
        limits: Limits {
            fuel: 2_000_000,
            ..fuzz_limits()
        },
        policy: Arc::new(ImportPolicy::default()),
        observer: None,
        files: None,
        ..RunOptions::default()
    };
    // Compiled once, before the clock starts: under a loaded test suite the first compile waits
    // behind other tests' and would count against the run's bound.
    let sandbox = hostile_sandbox();
    let started = Instant::now();
    let result = runtime()
        .block_on(sandbox.run(&hostile_program(data), &options))
        .expect("a hostile guest is an outcome, not a host fault");
    assert!(
        started.elapsed() <= options.limits.timeout + Duration::from_secs(1),
        "the run took {:?}: {result:?}",
        started.elapsed()
    );
    result
}
