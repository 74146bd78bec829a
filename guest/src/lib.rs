//! The guest: RustPython as a WASI reactor that runs one request per instance.
//!
//! The ABI it speaks is documented in `safe-python-protocol`. [`sandbox_init`] builds the
//! interpreter once, when Wizer takes the snapshot; every instance then starts from that memory
//! image. Runs on the same instance (a session) share one `__main__`; a fresh instance shares
//! nothing with any other.

use std::cell::OnceCell;

use rustpython::{InterpreterBuilder, InterpreterBuilderExt};
use rustpython::vm::builtins::{PyStr, PyTupleRef};
use rustpython::vm::function::FuncArgs;
use rustpython::vm::{
    AsObject, Interpreter, PyObjectRef, PyResult, Settings, TryFromObject, VirtualMachine,
};
use safe_python_protocol::{PythonError, Report, Request};

#[link(wasm_import_module = "safe_python_v2")]
unsafe extern "C" {
    fn request_len() -> i32;
    fn request_read(ptr: *mut u8);
    fn import_allowed(name_ptr: *const u8, name_len: i32) -> i32;
    fn report(ptr: *const u8, len: i32);
}

// The literal in `#[link]` cannot name the constant: keep the two in step at compile time.
const _: () = assert!(eq(safe_python_protocol::IMPORT_MODULE.as_bytes(), b"safe_python_v2"));
const fn eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Modules imported into the snapshot so that importing them costs nothing at run time. These are
/// the default allowlist plus what the driver needs; importing is not allowing.
const PRELOADED: &[&str] = &[
    "collections", "datetime", "itertools", "math", "queue", "random", "re", "stat", "statistics",
    "time", "unicodedata", "ast", "traceback", "linecache", "types", "io", "json", "functools",
    "operator", "string", "decimal", "fractions", "heapq", "bisect", "copy", "textwrap",
];

const DRIVER: &str = include_str!("driver.py");

struct Guest {
    interpreter: Interpreter,
    /// `driver.run`, the Python side of a run.
    run: PyObjectRef,
}

// wasm32-wasip1 has one thread; the snapshot keeps this cell filled.
thread_local! {
    static GUEST: OnceCell<Guest> = const { OnceCell::new() };
}

#[unsafe(no_mangle)]
pub extern "C" fn sandbox_init() {
    GUEST.with(|cell| {
        cell.get_or_init(|| {
            let mut settings = Settings::default();
            // Unbuffered stdio: every write reaches the host at once, so output streams live.
            settings.buffered_stdio = false;
            settings.ignore_environment = true;
            settings.import_site = false;
            settings.user_site_directory = false;
            let interpreter = InterpreterBuilder::new()
                .settings(settings)
                .init_stdlib()
                .interpreter();
            let run = interpreter.enter(|vm| match prepare(vm) {
                Ok(run) => run,
                Err(exc) => {
                    vm.print_exception(&exc);
                    panic!("the guest failed to initialise");
                }
            });
            Guest { interpreter, run }
        });
    });
}

fn prepare(vm: &VirtualMachine) -> PyResult<PyObjectRef> {
    for name in PRELOADED {
        vm.import(*name, 0)?;
    }
    let scope = vm.new_scope_with_builtins();
    scope.globals.set_item("__name__", vm.ctx.new_str("_sandbox_driver").into(), vm)?;
    vm.run_string(scope.clone(), DRIVER, "<sandbox>")?;
    let run = scope.globals.get_item("run", vm)?;
    install_import_policy(vm)?;
    Ok(run)
}

/// Replaces `builtins.__import__` with a native function (it has no `__globals__` or closure for
/// user code to reach the original through) that asks the host about imports made by user code.
fn install_import_policy(vm: &VirtualMachine) -> PyResult<()> {
    let original = vm.builtins.get_attr("__import__", vm)?;
    let hook = vm.new_function("__import__", move |args: FuncArgs, vm: &VirtualMachine| -> PyResult {
        check_import(&args, vm)?;
        original.call(args, vm)
    });
    vm.builtins.as_object().set_attr("__import__", hook, vm)
}

fn arg<'a>(args: &'a FuncArgs, index: usize, name: &str) -> Option<&'a PyObjectRef> {
    args.args.get(index).or_else(|| args.kwargs.get(name))
}

fn check_import(args: &FuncArgs, vm: &VirtualMachine) -> PyResult<()> {
    let globals = arg(args, 1, "globals").filter(|g| !vm.is_none(g));
    if !is_user_code(globals, vm) {
        return Ok(());
    }
    let Some(name) = arg(args, 0, "name").and_then(|n| n.downcast_ref::<PyStr>()) else {
        // Let the real `__import__` raise its own TypeError.
        return Ok(());
    };
    let level = arg(args, 4, "level")
        .map(|l| i64::try_from_object(vm, l.clone()))
        .transpose()?
        .unwrap_or(0);
    let name = name.to_string_lossy();
    if level != 0 {
        return Err(vm.new_import_error(
            "relative imports are not available in this sandbox".to_owned(),
            vm.ctx.new_str(name.as_ref()),
        ));
    }
    if host_allows(&name) {
        return Ok(());
    }
    let allowed = REQUEST.with(|r| r.borrow().as_ref().map(|r| r.allowed.join(", ")));
    let msg = format!(
        "import of '{name}' is not allowed in this sandbox (allowed: {})",
        allowed.unwrap_or_default()
    );
    Err(vm.new_import_error(msg, vm.ctx.new_str(name.as_ref())))
}

/// An import is the standard library's own when `globals` is the namespace of a loaded module
/// other than `__main__`. Anything else (user code, `exec` with a made-up dict, a direct
/// `__import__('os')` call) is policed.
fn is_user_code(globals: Option<&PyObjectRef>, vm: &VirtualMachine) -> bool {
    let Some(globals) = globals else { return true };
    let owner = (|| -> PyResult<bool> {
        let name = globals.get_item("__name__", vm)?;
        let Some(name) = name.downcast_ref::<PyStr>() else { return Ok(false) };
        if name.to_str() == Some("__main__") {
            return Ok(false);
        }
        let module = vm.sys_module.get_attr("modules", vm)?.get_item(name, vm)?;
        Ok(module.get_attr("__dict__", vm)?.is(globals))
    })();
    !matches!(owner, Ok(true))
}

fn host_allows(name: &str) -> bool {
    // SAFETY: the host reads `name.len()` bytes from a live buffer; it copies and keeps nothing.
    unsafe { import_allowed(name.as_ptr(), name.len() as i32) == 1 }
}

thread_local! {
    /// The request being run, for wording refusals.
    static REQUEST: std::cell::RefCell<Option<Request>> = const { std::cell::RefCell::new(None) };
}

fn read_request() -> Result<Request, String> {
    // SAFETY: plain host calls; the host writes exactly `len` bytes into the buffer we own.
    let bytes = unsafe {
        let len = usize::try_from(request_len()).map_err(|_| "negative request length")?;
        let mut buf = vec![0u8; len];
        request_read(buf.as_mut_ptr());
        buf
    };
    serde_json::from_slice(&bytes).map_err(|e| format!("malformed request: {e}"))
}

fn send_report(r: &Report) {
    let bytes = serde_json::to_vec(r).expect("a report always serialises");
    // SAFETY: the host copies `len` bytes out of a live buffer.
    unsafe { report(bytes.as_ptr(), bytes.len() as i32) }
}

#[unsafe(no_mangle)]
pub extern "C" fn sandbox_run() {
    sandbox_init();
    let request = match read_request() {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let (code, filename, max_chars) =
        (request.code.clone(), request.filename.clone(), request.max_result_chars);
    REQUEST.with(|r| *r.borrow_mut() = Some(request));
    let report = GUEST.with(|cell| {
        let guest = cell.get().expect("initialised above");
        guest.interpreter.enter(|vm| {
            let out = guest
                .run
                .call((vm.ctx.new_str(code), max_chars, vm.ctx.new_str(filename)), vm);
            match out.and_then(|o| to_report(o, vm)) {
                Ok(report) => report,
                Err(exc) => {
                    // The driver itself failed (e.g. MemoryError while describing an error).
                    let kind = exc.class().name().to_string();
                    let message = exc.as_object().str(vm).map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
                    Report {
                        result: None,
                        error: Some(PythonError { traceback: format!("{kind}: {message}\n"), kind, message }),
                    }
                }
            }
        })
    });
    send_report(&report);
}

fn to_report(out: PyObjectRef, vm: &VirtualMachine) -> PyResult<Report> {
    let tuple = PyTupleRef::try_from_object(vm, out)?;
    let field = |i: usize| -> PyResult<Option<String>> {
        Option::<String>::try_from_object(vm, tuple.as_slice()[i].clone())
    };
    let error = match (field(1)?, field(2)?, field(3)?) {
        (Some(kind), Some(message), Some(traceback)) => Some(PythonError { kind, message, traceback }),
        _ => None,
    };
    Ok(Report { result: field(0)?, error })
}
