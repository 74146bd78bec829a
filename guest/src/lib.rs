//! The guest: RustPython as a WASI reactor that runs one request per instance.
//!
//! The ABI it speaks is documented in `safe-python-protocol`. [`sandbox_init`] builds the
//! interpreter once, when Wizer takes the snapshot; every instance then starts from that memory
//! image. Runs on the same instance (a session) share one `__main__`; a fresh instance shares
//! nothing with any other.
//!
//! The driver (compile, run, describe the result) is Rust, not Python: user code runs with no
//! driver frame beneath it, every function it can reach that the sandbox put there is native (no
//! `__globals__`, no closure cells), and the state that matters (the import trust set, the request,
//! the cut bounds) lives in Rust where Python cannot reach it.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::HashSet;

use ruff_source_file::SourceFileBuilder;
use rustpython::vm::builtins::{
    PyBaseExceptionRef, PyBytes, PyClassMethod, PyCode, PyDict, PyFunction, PyList, PyModule,
    PyStaticMethod, PyStr, PyTuple, PyType,
};
use rustpython::vm::bytecode::CodeFlags;
use rustpython::vm::compiler::codegen::compile::compile_top;
use rustpython::vm::compiler::codegen::error::{CodegenError, CodegenErrorType};
use rustpython::vm::compiler::{self, CompileOpts, Mode, ast};
use rustpython::vm::frame::FrameObjectRef;
use rustpython::vm::function::FuncArgs;
use rustpython::vm::scope::Scope;
use rustpython::vm::{
    AsObject, Interpreter, PyObjectRef, PyRef, PyResult, Settings, TryFromObject, VirtualMachine,
};
use rustpython::{InterpreterBuilder, InterpreterBuilderExt};
use safe_python_protocol::{self as protocol, PythonError, Report, Request};

mod last_value;
mod random;
use last_value::{Plan, Reading};

#[link(wasm_import_module = "safe_python_v4")]
unsafe extern "C" {
    fn request_len() -> i32;
    fn request_read(ptr: *mut u8);
    fn import_allowed(name_ptr: *const u8, name_len: i32) -> i32;
    fn report(ptr: *const u8, len: i32);
    fn service_call(ptr: *const u8, len: i32) -> i32;
    fn service_answer(ptr: *mut u8);
}

// The literal in `#[link]` cannot name the constant: keep the two in step at compile time.
const _: () = assert!(eq(protocol::IMPORT_MODULE.as_bytes(), b"safe_python_v4"));
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

/// Modules imported into the snapshot, besides the default allowlist
/// ([`safe_python_protocol::DEFAULT_ALLOWED`]), because the driver needs them; importing is not
/// allowing.
const PRELOADED: &[&str] = &[
    "ast",
    "traceback",
    "linecache",
    "types",
    "io",
    "json",
    "functools",
    "operator",
    "string",
    "decimal",
    "fractions",
    "heapq",
    "bisect",
    "copy",
    "textwrap",
];

/// Native objects the driver uses, fetched once at initialisation so that user code replacing a
/// module attribute later changes nothing the driver calls.
struct Driver {
    format_exception: PyObjectRef,
    linecache: PyObjectRef,
    /// `random`'s shared generator, behind the module's functions (`random.random()`, ...).
    random_inst: PyRef<random::PyRandom>,
    /// The `__main__` module and its namespace, made at initialisation (so every instance starts
    /// with one) and kept by the runs of a session.
    main: (PyObjectRef, PyRef<PyDict>),
    /// Whether this instance's `random` was reseeded: its first run does it.
    seeded: Cell<bool>,
    /// `sys.stdout` and `sys.stderr` as the interpreter made them: unbuffered and write-through,
    /// so that, while code has not replaced or reconfigured them, they hold nothing to flush.
    stdio: [PyObjectRef; 2],
    /// The event loop that runs top-level `await`: one per instance, so that a session's tasks
    /// and queues outlive the call that made them.
    event_loop: RefCell<Option<PyObjectRef>>,
}

struct Guest {
    interpreter: Interpreter,
    driver: Driver,
}

// wasm32-wasip1 has one thread; the snapshot keeps these cells filled.
thread_local! {
    static GUEST: OnceCell<Guest> = const { OnceCell::new() };
    static TRUST: RefCell<Trust> = RefCell::new(Trust::default());
    /// The request being run: the refusal wording and the cut bound.
    static REQUEST: RefCell<Option<Request>> = const { RefCell::new(None) };
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
            let builder = InterpreterBuilder::new().settings(settings).init_stdlib();
            // Ours replaces RustPython's `_random` (the later definition of a name wins).
            let random = random::module_def(&builder.ctx);
            let interpreter = builder.add_native_module(random).interpreter();
            let driver = interpreter.enter(|vm| match prepare(vm) {
                Ok(driver) => driver,
                Err(exc) => {
                    vm.print_exception(&exc);
                    panic!("the guest failed to initialise");
                }
            });
            Guest {
                interpreter,
                driver,
            }
        });
    });
}

fn prepare(vm: &VirtualMachine) -> PyResult<Driver> {
    for name in safe_python_protocol::DEFAULT_ALLOWED
        .iter()
        .chain(PRELOADED)
    {
        vm.import(*name, 0)?;
    }
    let module = |name: &'static str| vm.import(name, 0);
    let main_globals = vm.new_scope_with_main()?.globals;
    let main_module = vm
        .sys_module
        .get_attr("modules", vm)?
        .get_item("__main__", vm)?;
    let driver = Driver {
        format_exception: module("traceback")?.get_attr("format_exception", vm)?,
        linecache: module("linecache")?.get_attr("cache", vm)?,
        random_inst: module("random")?
            .get_attr("_inst", vm)?
            .downcast()
            .map_err(|_| vm.new_type_error("random._inst is not a _random.Random"))?,
        main: (main_module, main_globals),
        seeded: Cell::new(false),
        stdio: [
            vm.sys_module.get_attr("stdout", vm)?,
            vm.sys_module.get_attr("stderr", vm)?,
        ],
        event_loop: RefCell::new(None),
    };
    install_asyncio(vm)?;
    install_open(vm)?;
    trust_loaded_modules(vm)?;
    install_import_policy(vm)?;
    warm_up(&driver, vm)?;
    Ok(driver)
}

/// Runs what a call runs (compiling, running, reading the value, flushing, describing an error)
/// once in a scratch namespace, so that what that path sets up lazily (method caches, interned
/// names, the compiler's tables, the allocator's free lists) is in the snapshot instead of being
/// redone by every instance (with `__main__` made here too: `x = 1` 374 k -> 275 k fuel). Imports
/// nothing and leaves nothing that user code can see.
fn warm_up(driver: &Driver, vm: &VirtualMachine) -> PyResult<()> {
    const SOURCE: &str = "x = [1, 'a', (2.0, None)]\nx[0] += 1\ny = {'k': x}\nlen(y)\n";
    let globals = vm.ctx.new_dict();
    globals.set_item("__builtins__", vm.builtins.clone().into(), vm)?;
    driver.execute(SOURCE, "<warm-up>", &globals, vm)?;
    if let Err(exc) = driver.execute("1 / 0", "<warm-up>", &globals, vm) {
        driver.describe(&exc, 1 << 10, vm);
    }
    driver.flush(vm);
    Ok(())
}

/// The asyncio adapter both engines share (an event loop with no sockets or signals), installed
/// as trusted code like the standard library it adapts.
fn install_asyncio(vm: &VirtualMachine) -> PyResult<()> {
    const SOURCE: &str = include_str!("../../src/sandbox/asyncio_loop.py");
    let code = vm
        .builtins
        .get_attr("compile", vm)?
        .call((SOURCE, "<sandbox asyncio>", "exec"), vm)?
        .downcast::<PyCode>()
        .map_err(|_| vm.new_type_error("compile() did not return code"))?;
    TRUST.with(|t| t.borrow_mut().add_code(code.clone(), vm));
    let scope = vm.new_scope_with_builtins();
    vm.run_code_obj(code, scope.clone())?;
    let install = scope.globals.get_item("_install_asyncio", vm)?;
    install.call((vm.sys_module.clone(), vm.import("time", 0)?), vm)?;
    Ok(())
}

/// `open` (and `io.open`): the real one, over the folders the host serves when a run has files
/// (`/data`, `/out`), whose errors say where files live. It is native, so tracebacks show no frame
/// of it and user code reaches nothing through it.
fn install_open(vm: &VirtualMachine) -> PyResult<()> {
    let real = vm.import("_io", 0)?.get_attr("open", vm)?;
    let stat = vm.import("posix", 0)?.get_attr("stat", vm)?;
    let errno = vm.import("errno", 0)?;
    // WASI's "capabilities insufficient" (a path outside the folders), which `errno` may not name.
    const ENOTCAPABLE: i64 = 76;
    let mut denied = vec![ENOTCAPABLE];
    for name in ["EACCES", "EPERM", "EROFS"] {
        denied.push(errno.get_attr(name, vm)?.try_into_value::<i64>(vm)?);
    }
    let open = vm.new_function(
        "open",
        move |args: FuncArgs, vm: &VirtualMachine| -> PyResult {
            let file = args.args.first().cloned();
            real.call(args, vm).map_err(|e| {
                let path = file.filter(|f| !f.fast_isinstance(vm.ctx.types.int_type));
                match path {
                    Some(path) => explain(e, path, &denied, &stat, vm),
                    None => e,
                }
            })
        },
    );
    vm.builtins.as_object().set_attr("open", open.clone(), vm)?;
    vm.import("io", 0)?.set_attr("open", open, vm)
}

/// `e` from opening `path`, said again with where files live: `PermissionError` for what may not
/// be done there, the same class otherwise. Anything else (no `errno`, an unusual subclass)
/// passes unchanged.
fn explain(
    e: PyBaseExceptionRef,
    path: PyObjectRef,
    denied: &[i64],
    stat: &PyObjectRef,
    vm: &VirtualMachine,
) -> PyBaseExceptionRef {
    let os_error = vm.ctx.exceptions.os_error;
    let (Ok(code), Ok(strerror)) = (
        e.as_object().get_attr("errno", vm),
        e.as_object().get_attr("strerror", vm),
    ) else {
        return e;
    };
    if !e.fast_isinstance(os_error) {
        return e;
    }
    let Ok(number) = code.clone().try_into_value::<i64>(vm) else {
        return e;
    };
    let class = if denied.contains(&number) {
        vm.ctx.exceptions.permission_error.to_owned()
    } else {
        e.class().to_owned()
    };
    let mounted = stat.call((protocol::DATA_DIR,), vm).is_ok();
    let here = if mounted {
        protocol::FILES_ARE_HERE
    } else {
        protocol::NO_FILES_HERE
    };
    let strerror = strerror
        .str(vm)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    // RustPython appends the error's number, which the exception already shows as `[Errno N]`.
    let strerror = match strerror.rfind(" (os error ") {
        Some(at) if strerror.ends_with(')') => &strerror[..at],
        _ => &strerror,
    };
    let message = vm.ctx.new_str(format!("{strerror}: {here}"));
    match vm.invoke_exception(&class, vec![code, message.into(), path]) {
        Ok(explained) => {
            let suppress = vm.ctx.true_value.clone();
            let _ = explained
                .as_object()
                .set_attr("__suppress_context__", suppress, vm);
            explained
        }
        Err(_) => e,
    }
}

// ---------------------------------------------------------------------------------------------
// Import policy

/// Which code is the standard library's own, by identity of its code objects (strong references
/// keep the identities from being reused). Nothing user code passes to an import (globals,
/// `__name__`, file names given to `compile`, `code.replace`) can make a code object one of these.
#[derive(Default)]
struct Trust {
    codes: HashSet<usize>,
    keep: Vec<PyRef<PyCode>>,
    /// For each import in progress that the policy let through, how many Python frames were on
    /// the stack when it started: frames above that belong to the import itself.
    imports: Vec<usize>,
}

impl Trust {
    fn contains(&self, code: &PyRef<PyCode>) -> bool {
        self.codes
            .contains(&(code.as_object() as *const _ as usize))
    }

    /// Trusts `code` and every code object nested in its constants (functions, classes,
    /// lambdas, comprehensions defined in it).
    fn add_code(&mut self, code: PyRef<PyCode>, vm: &VirtualMachine) {
        if !self.codes.insert(code.as_object() as *const _ as usize) {
            return;
        }
        if let Ok(consts) = code.as_object().get_attr("co_consts", vm)
            && let Some(consts) = consts.downcast_ref::<PyTuple>()
        {
            for c in consts.as_slice() {
                if let Ok(inner) = c.clone().downcast::<PyCode>() {
                    self.add_code(inner, vm);
                }
            }
        }
        self.keep.push(code);
    }

    /// Trusts the code of a function, of every function in a class (methods, static and class
    /// methods, properties), recursively. Only run at initialisation, before any user code.
    fn add_object(&mut self, obj: &PyObjectRef, seen: &mut HashSet<usize>, vm: &VirtualMachine) {
        if !seen.insert(obj.as_object() as *const _ as usize) {
            return;
        }
        if let Some(code) = obj.downcast_ref::<PyCode>() {
            self.add_code(code.to_owned(), vm);
        } else if obj.downcast_ref::<PyFunction>().is_some() {
            if let Ok(code) = obj.get_attr("__code__", vm)
                && let Ok(code) = code.downcast::<PyCode>()
            {
                self.add_code(code, vm);
            }
        } else if obj.downcast_ref::<PyStaticMethod>().is_some()
            || obj.downcast_ref::<PyClassMethod>().is_some()
        {
            if let Ok(f) = obj.get_attr("__func__", vm) {
                self.add_object(&f, seen, vm);
            }
        } else if obj.class().is(vm.ctx.types.property_type) {
            for accessor in ["fget", "fset", "fdel"] {
                if let Ok(f) = obj.get_attr(accessor, vm) {
                    self.add_object(&f, seen, vm);
                }
            }
        } else if obj.downcast_ref::<PyType>().is_some()
            && let Ok(namespace) = obj.get_attr("__dict__", vm)
            && let Ok(members) = vm.call_method(&namespace, "values", ())
            && let Ok(members) = members.try_to_value::<Vec<PyObjectRef>>(vm)
        {
            for member in &members {
                self.add_object(member, seen, vm);
            }
        }
    }
}

/// Trusts the code of every module loaded while the snapshot is taken.
fn trust_loaded_modules(vm: &VirtualMachine) -> PyResult<()> {
    let modules = vm.sys_module.get_attr("modules", vm)?;
    let modules = modules
        .downcast::<PyDict>()
        .map_err(|_| vm.new_type_error("sys.modules"))?;
    let mut seen = HashSet::new();
    TRUST.with(|t| {
        let mut trust = t.borrow_mut();
        for (_, module) in modules.into_iter() {
            let Some(module) = module.downcast_ref::<PyModule>() else {
                continue;
            };
            for (_, value) in module.dict().into_iter() {
                trust.add_object(&value, &mut seen, vm);
            }
        }
    });
    Ok(())
}

/// The Python frames on the stack, innermost first.
fn frames(vm: &VirtualMachine) -> Vec<FrameObjectRef> {
    let mut out = Vec::new();
    let mut frame = vm.current_frame();
    while let Some(f) = frame {
        frame = f.f_back(vm);
        out.push(f);
    }
    out
}

/// Whether a request comes from the standard library itself: the calling frame runs trusted
/// code, the module `name` it asks for is spelled out in that code (a dynamic name, such as one a
/// stdlib function was given by user code, is not vouched for; codec modules are the exception,
/// since codec lookup builds their names), and every frame of the import in progress that the
/// policy let through runs trusted code too (so a hook user code planted in the import machinery
/// cannot ride on it). With `within_import`, an import let through must be in progress: modules
/// are made only by imports, never by a direct call of a loader.
fn stdlib_request(vm: &VirtualMachine, name: Option<&str>, within_import: bool) -> bool {
    let frames = frames(vm);
    // No Python frame: a native callback the driver ran (a `__repr__` or `flush` that is a
    // builtin), which user code chose.
    let Some(caller) = frames.first() else {
        return false;
    };
    let code = caller.f_code();
    if let Some(name) = name
        && !name.starts_with("encodings.")
        && !spelled_in(&code, name, vm)
    {
        return false;
    }
    TRUST.with(|t| {
        let trust = t.borrow();
        if !trust.contains(&code) {
            return false;
        }
        match trust.imports.last() {
            Some(&base) => frames
                .iter()
                .take(frames.len().saturating_sub(base))
                .all(|f| trust.contains(&f.f_code())),
            None => !within_import,
        }
    })
}

/// Whether `name` is one of the names or string constants of `code`.
fn spelled_in(code: &PyRef<PyCode>, name: &str, vm: &VirtualMachine) -> bool {
    ["co_names", "co_consts"].iter().any(|field| {
        code.as_object()
            .get_attr(*field, vm)
            .ok()
            .and_then(|t| t.downcast::<PyTuple>().ok())
            .is_some_and(|t| {
                t.as_slice().iter().any(|item| {
                    item.downcast_ref::<PyStr>()
                        .is_some_and(|s| s.to_str() == Some(name))
                })
            })
    })
}

/// Runs `f` as an import the policy let through: nested imports made by the standard library's
/// own frames above this point are trusted, and frozen modules loaded by it become trusted.
fn letting_through<T>(vm: &VirtualMachine, f: impl FnOnce() -> T) -> T {
    let depth = frames(vm).len();
    TRUST.with(|t| t.borrow_mut().imports.push(depth));
    let out = f();
    TRUST.with(|t| t.borrow_mut().imports.pop());
    out
}

fn arg<'a>(args: &'a FuncArgs, index: usize, name: &str) -> Option<&'a PyObjectRef> {
    args.args.get(index).or_else(|| args.kwargs.get(name))
}

fn import_error(vm: &VirtualMachine, msg: String, name: &str) -> PyBaseExceptionRef {
    vm.new_import_error(msg, vm.ctx.new_str(name))
}

/// Replaces `builtins.__import__` with a native function that asks the host about imports made
/// by user code, and wraps the `_imp` functions that make modules so that only imports the
/// policy let through can use them (the route around `__import__` through a module's
/// `__spec__.loader`).
fn install_import_policy(vm: &VirtualMachine) -> PyResult<()> {
    // Fetched first: once the hook is in place, an import from here (no frame) is policed.
    let imp = vm.import("_imp", 0)?;
    let original = vm.builtins.get_attr("__import__", vm)?;
    let hook = vm.new_function(
        "__import__",
        move |args: FuncArgs, vm: &VirtualMachine| -> PyResult {
            let name = arg(&args, 0, "name")
                .and_then(|n| n.downcast_ref::<PyStr>())
                .and_then(|n| n.to_str().map(str::to_owned));
            let level = arg(&args, 4, "level")
                .and_then(|l| i64::try_from_object(vm, l.clone()).ok())
                .unwrap_or(0);
            // A relative import names its module relative to a package the frame's globals say,
            // which is checked instead of the name. An import that loads nothing (a native
            // function fetching a loaded module, as `json`'s encoder does) need not be spelled.
            let spelled = match &name {
                _ if level > 0 => None,
                Some(n) if loads_nothing(&args, n, vm) => None,
                other => other.as_deref(),
            };
            // With no frame at all, the interpreter's own machinery is asking (reporting what a
            // `__del__` raised once the code ended fetches `sys`): handing back a module that
            // is loaded already loads nothing, and no user frame is there to receive it.
            if level <= 0
                && vm.current_frame().is_none()
                && name.as_deref().is_some_and(|n| loads_nothing(&args, n, vm))
            {
                return original.call(args, vm);
            }
            if name.is_some()
                && stdlib_request(vm, spelled, false)
                && (level <= 0 || relative_base_loaded(&args, level, vm))
            {
                return letting_through(vm, || original.call(args, vm));
            }
            let args = checked_import(&args, vm)?;
            letting_through(vm, || original.call(args, vm))
        },
    );
    vm.builtins.as_object().set_attr("__import__", hook, vm)?;

    let get_frozen = imp.get_attr("get_frozen_object", vm)?;
    let wrapped = vm.new_function(
        "get_frozen_object",
        move |args: FuncArgs, vm: &VirtualMachine| -> PyResult {
            // Code unmarshalled from caller-supplied data is never trusted.
            let from_data = arg(&args, 1, "data").is_some_and(|d| !vm.is_none(d));
            let trusted = !from_data && stdlib_request(vm, None, true);
            let code = get_frozen.call(args, vm)?;
            if trusted && let Ok(code) = code.clone().downcast::<PyCode>() {
                TRUST.with(|t| t.borrow_mut().add_code(code, vm));
            }
            Ok(code)
        },
    );
    imp.set_attr("get_frozen_object", wrapped, vm)?;
    for name in ["create_builtin", "init_frozen", "create_dynamic"] {
        let Ok(inner) = imp.get_attr(name, vm) else {
            continue;
        };
        let guarded = vm.new_function(
            name,
            move |args: FuncArgs, vm: &VirtualMachine| -> PyResult {
                if !stdlib_request(vm, None, true) {
                    return Err(import_error(
                        vm,
                        "modules are made only by imports in this sandbox".to_owned(),
                        "",
                    ));
                }
                inner.call(args, vm)
            },
        );
        imp.set_attr(name, guarded, vm)?;
    }
    Ok(())
}

/// Whether importing `name` with these arguments only hands back loaded modules: an absolute
/// import with no fromlist of a module whose every package is in `sys.modules` already.
fn loads_nothing(args: &FuncArgs, name: &str, vm: &VirtualMachine) -> bool {
    let empty_fromlist = arg(args, 3, "fromlist").is_none_or(|f| {
        vm.is_none(f)
            || f.downcast_ref::<PyTuple>().is_some_and(|t| t.is_empty())
            || f.downcast_ref::<PyList>()
                .is_some_and(|l| l.borrow_vec().is_empty())
    });
    let Ok(modules) = vm.sys_module.get_attr("modules", vm) else {
        return false;
    };
    empty_fromlist
        && !name.is_empty()
        && name
            .match_indices('.')
            .map(|(i, _)| &name[..i])
            .chain([name])
            .all(|prefix| {
                modules
                    .downcast_ref::<PyDict>()
                    .is_some_and(|m| m.get_item_opt(prefix, vm).is_ok_and(|v| v.is_some()))
            })
}

/// Whether the package a relative import starts from is loaded already: a trusted function run
/// with forged globals (`types.FunctionType(code, {'__package__': ...})`) cannot make a relative
/// import load a package of the caller's choosing.
fn relative_base_loaded(args: &FuncArgs, level: i64, vm: &VirtualMachine) -> bool {
    let Some(globals) = arg(args, 1, "globals").and_then(|g| g.downcast_ref::<PyDict>()) else {
        return false;
    };
    let Ok(Some(package)) = globals.get_item_opt("__package__", vm) else {
        return false;
    };
    let Some(package) = package.downcast_ref::<PyStr>().and_then(|p| p.to_str()) else {
        return false;
    };
    let mut base = package;
    for _ in 1..level {
        match base.rsplit_once('.') {
            Some((parent, _)) => base = parent,
            None => return false,
        }
    }
    !base.is_empty()
        && vm
            .sys_module
            .get_attr("modules", vm)
            .is_ok_and(|m| m.get_item(base, vm).is_ok())
}

/// The arguments of an import user code asked for, checked with the host and normalised (an
/// exact `str` name, a tuple fromlist, level 0) so that what the real `__import__` sees is what
/// was checked.
fn checked_import(args: &FuncArgs, vm: &VirtualMachine) -> PyResult<FuncArgs> {
    let Some(name) = arg(args, 0, "name").and_then(|n| n.downcast_ref::<PyStr>()) else {
        // Let the real `__import__` raise its own TypeError.
        return Ok(args.clone());
    };
    let shown = name.to_string_lossy();
    let shown = clip(&shown, 200);
    let level = arg(args, 4, "level")
        .map(|l| i64::try_from_object(vm, l.clone()))
        .transpose()?
        .unwrap_or(0);
    if level != 0 {
        return Err(import_error(
            vm,
            "relative imports are not available in this sandbox".to_owned(),
            &shown,
        ));
    }
    let Some(name) = name.to_str().filter(|n| protocol::is_module_name(n)) else {
        return Err(import_error(
            vm,
            format!("'{shown}' is not a module name this sandbox imports"),
            &shown,
        ));
    };
    let fromlist: Vec<PyObjectRef> = match arg(args, 3, "fromlist") {
        Some(f) if !vm.is_none(f) => f.try_to_value(vm)?,
        _ => Vec::new(),
    };
    // `import a.b` binds `a`; `from a.b import x` hands over `a.b`.
    let handed = if fromlist.is_empty() {
        name.split('.').next().unwrap_or(name)
    } else {
        name
    };
    let answer = host_answer(handed);
    if answer == protocol::HOST_MODULE {
        load_host_module(handed, vm)?;
    } else if answer != protocol::ALLOWED {
        let allowed = REQUEST.with(|r| r.borrow().as_ref().map(|r| r.allowed.join(", ")));
        let msg = format!(
            "import of '{handed}' is not allowed in this sandbox (allowed: {})",
            allowed.unwrap_or_default()
        );
        return Err(import_error(vm, msg, handed));
    }
    let none = || vm.ctx.none();
    Ok(FuncArgs::from(vec![
        vm.ctx.new_str(name).into(),
        arg(args, 1, "globals").cloned().unwrap_or_else(none),
        arg(args, 2, "locals").cloned().unwrap_or_else(none),
        vm.ctx.new_tuple(fromlist).into(),
        vm.ctx.new_int(0).into(),
    ]))
}

/// The host's answer about importing `name`: [`protocol::ALLOWED`], [`protocol::HOST_MODULE`],
/// or a refusal.
fn host_answer(name: &str) -> i32 {
    // SAFETY: the host reads `name.len()` bytes from a live buffer; it copies and keeps nothing.
    unsafe { import_allowed(name.as_ptr(), name.len() as i32) }
}

/// Sends a service frame and returns the host's answer, or `None` if it refused the frame.
fn service(frame: &[u8]) -> Option<Vec<u8>> {
    let len = i32::try_from(frame.len()).ok()?;
    // SAFETY: the host reads `len` bytes from a live buffer; it copies and keeps nothing.
    let answer_len = usize::try_from(unsafe { service_call(frame.as_ptr(), len) }).ok()?;
    let mut answer = vec![0u8; answer_len];
    // SAFETY: the host writes exactly the answer's length, which `answer` holds.
    unsafe { service_answer(answer.as_mut_ptr()) };
    Some(answer)
}

/// Makes the module `name` that the host provides, unless it is loaded: its source, from the
/// host, runs as trusted code in a new module whose `_service` global sends service frames
/// (`_service(frame: bytes) -> bytes`, `OSError` if the host refuses one).
fn load_host_module(name: &str, vm: &VirtualMachine) -> PyResult<()> {
    let modules = vm.sys_module.get_attr("modules", vm)?;
    if modules.get_item(name, vm).is_ok() {
        return Ok(());
    }
    let mut frame = vec![protocol::service::MODULE_SOURCE];
    frame.extend_from_slice(name.as_bytes());
    let source = service(&frame)
        .and_then(|s| String::from_utf8(s).ok())
        .ok_or_else(|| import_error(vm, format!("the host did not provide '{name}'"), name))?;
    let filename = format!("<sandbox {name}>");
    let code = vm
        .builtins
        .get_attr("compile", vm)?
        .call((source, filename, "exec"), vm)?
        .downcast::<PyCode>()
        .map_err(|_| vm.new_type_error("compile() did not return code"))?;
    TRUST.with(|t| t.borrow_mut().add_code(code.clone(), vm));
    let send = vm.new_function(
        "_service",
        |frame: PyRef<PyBytes>, vm: &VirtualMachine| -> PyResult<PyRef<PyBytes>> {
            service(frame.as_bytes())
                .map(|answer| vm.ctx.new_bytes(answer))
                .ok_or_else(|| vm.new_os_error("the host refused this frame"))
        },
    );
    let globals = vm.ctx.new_dict();
    globals.set_item("_service", send.into(), vm)?;
    let module = vm.new_module(name, globals.clone(), None);
    modules.set_item(name, module.clone().into(), vm)?;
    if let Err(e) = vm.run_code_obj(code, Scope::with_builtins(None, globals, vm)) {
        let _ = modules.del_item(name, vm);
        return Err(e);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// One run

/// `source` compiled as written, with the checks, warnings and errors `compile()` gives. The VM's
/// own path parses the source a second time to look for invalid escape sequences and numbers run
/// into keywords (`1if`); a source that cannot hold either (no backslash, no digit directly
/// followed by a letter or by `.` and a letter) is compiled directly. Whatever that direct compile
/// meets (an error, a warning) is left to the VM's path, so that it is reported the same way.
fn compile_as_written(
    source: &str,
    filename: &str,
    opts: &CompileOpts,
    vm: &VirtualMachine,
) -> PyResult<PyRef<PyCode>> {
    if !may_warn_early(source) {
        let mut on_warning = |location, _message| {
            Err(CodegenError {
                location: Some(location),
                end_location: None,
                error: CodegenErrorType::SyntaxError(String::new()),
                source_path: filename.to_owned(),
            })
        };
        let compiled = compiler::compile_with_syntax_warning_handler(
            source,
            Mode::Exec,
            filename,
            opts.clone(),
            &mut on_warning,
        );
        if let Ok(code) = compiled {
            return Ok(PyCode::new_ref_from_bytecode(vm, code));
        }
    }
    vm.compile_with_opts(source, Mode::Exec, filename, opts.clone())
        .map_err(|e| e.into_pyexception(vm, Some(source)))
}

/// Whether `source` may hold what the VM warns about before compiling (see
/// [`compile_as_written`]).
fn may_warn_early(source: &str) -> bool {
    let bytes = source.as_bytes();
    bytes.iter().enumerate().any(|(i, &b)| match b {
        b'\\' => true,
        b'0'..=b'9' => match bytes.get(i + 1) {
            Some(next) if next.is_ascii_alphabetic() => true,
            Some(b'.') => bytes.get(i + 2).is_some_and(u8::is_ascii_alphabetic),
            _ => false,
        },
        _ => false,
    })
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
    let bound = request.max_field_bytes.min(protocol::MAX_FIELD_BYTES) as usize;
    let (code, filename) = (request.code.clone(), request.filename.clone());
    REQUEST.with(|r| *r.borrow_mut() = Some(request));
    let report = GUEST.with(|cell| {
        let guest = cell.get().expect("initialised above");
        guest
            .interpreter
            .enter(|vm| guest.driver.run(&code, &filename, bound, vm))
    });
    send_report(&report);
}

impl Driver {
    fn run(&self, source: &str, filename: &str, bound: usize, vm: &VirtualMachine) -> Report {
        let outcome = self.main(vm).and_then(|globals| {
            self.remember_source(source, filename, vm)?;
            let value = self.execute(source, filename, &globals, vm)?;
            Ok(match value {
                Some(v) if !vm.is_none(&v) => Some(v.repr(vm)?.to_string_lossy().into_owned()),
                _ => None,
            })
        });
        self.flush(vm);
        match outcome {
            Ok(result) => Report {
                result: result.map(|r| clip(&r, bound)),
                error: None,
            },
            Err(exc) => Report {
                result: None,
                error: Some(self.describe(&exc, bound, vm)),
            },
        }
    }

    /// Flushes `sys.stdout` and `sys.stderr`, so that all the code printed reaches the host before
    /// the report; skipped for a stream that is still the interpreter's own and still writes
    /// through, which holds nothing.
    fn flush(&self, vm: &VirtualMachine) {
        for (name, original) in ["stdout", "stderr"].into_iter().zip(&self.stdio) {
            let Ok(stream) = vm.sys_module.get_attr(name, vm) else {
                continue;
            };
            let writes_through = || {
                stream
                    .get_attr("write_through", vm)
                    .and_then(|w| w.try_to_bool(vm))
                    .unwrap_or(false)
            };
            if !(stream.is(original) && writes_through()) {
                let _ = vm.call_method(&stream, "flush", ());
            }
        }
    }

    /// The `__main__` namespace; the instance's first run reseeds `random` first.
    fn main(&self, vm: &VirtualMachine) -> PyResult<PyRef<PyDict>> {
        // The snapshot froze `random`'s shared generator: each instance gets a state of its own.
        // (`random.Random()` and `random.seed()` draw theirs from the host's entropy anyway.)
        if !self.seeded.replace(true) {
            self.random_inst.seed_from_entropy(vm)?;
        }
        let (module, globals) = &self.main;
        // User code may have replaced or removed it in an earlier run of the session.
        let modules = vm.sys_module.get_attr("modules", vm)?;
        modules.set_item("__main__", module.clone(), vm)?;
        Ok(globals.clone())
    }

    /// Lets tracebacks show the code's lines.
    fn remember_source(&self, source: &str, filename: &str, vm: &VirtualMachine) -> PyResult<()> {
        let lines: Vec<PyObjectRef> = source
            .split_inclusive('\n')
            .map(|l| vm.ctx.new_str(l).into())
            .collect();
        let entry = vm.ctx.new_tuple(vec![
            vm.ctx.new_int(source.len()).into(),
            vm.ctx.none(),
            vm.ctx.new_list(lines).into(),
            vm.ctx.new_str(filename).into(),
        ]);
        self.linecache.set_item(filename, entry.into(), vm)
    }

    /// Runs `source` in `globals`; returns the value of its last statement (an expression, or
    /// what a final assignment stored).
    fn execute(
        &self,
        source: &str,
        filename: &str,
        globals: &PyRef<PyDict>,
        vm: &VirtualMachine,
    ) -> PyResult<Option<PyObjectRef>> {
        let mut opts = vm.compile_opts();
        opts.allow_top_level_await = true;
        let as_written = compile_as_written(source, filename, &opts, vm)?;
        let (code, reading) = match last_value::plan(source) {
            Plan::AsWritten(reading) => (as_written, reading),
            Plan::Rewritten(module) => {
                let file = SourceFileBuilder::new(filename, source).finish();
                // What compiled as written compiles rewritten; were it not to, it would run as
                // written, without a value.
                match compile_top(ast::Mod::Module(module), file, Mode::Exec, opts) {
                    Ok(code) => (PyCode::new_ref_from_bytecode(vm, code), Reading::Hidden),
                    Err(_) => (as_written, Reading::Nothing),
                }
            }
        };
        let awaits = code.flags.contains(CodeFlags::COROUTINE);
        let event_loop = if awaits {
            Some(self.event_loop(vm)?)
        } else {
            None
        };
        let scope = Scope::with_builtins(None, globals.clone(), vm);
        let ran = vm
            .run_code_obj(code, scope)
            .and_then(|coroutine| match &event_loop {
                Some(l) => vm.call_method(l, "run_until_complete", (coroutine,)),
                None => Ok(coroutine),
            });
        let value = reading.read(globals, vm);
        for hidden in last_value::HIDDEN {
            let _ = globals.del_item(hidden, vm);
        }
        ran?;
        Ok(value)
    }

    /// The event loop that runs code with a top-level `await`, which needs asyncio to be allowed,
    /// as it would be for `asyncio.run`.
    fn event_loop(&self, vm: &VirtualMachine) -> PyResult {
        if host_answer("asyncio") != protocol::ALLOWED {
            let allowed = REQUEST.with(|r| r.borrow().as_ref().map(|r| r.allowed.join(", ")));
            return Err(vm.new_exception_msg(
                vm.ctx.exceptions.syntax_error.to_owned(),
                format!(
                    "top-level 'await' runs on asyncio, which is not allowed in this sandbox \
                     (allowed: {})",
                    allowed.unwrap_or_default()
                )
                .into(),
            ));
        }
        let asyncio = vm.import("asyncio", 0)?;
        let current = self.event_loop.borrow().clone();
        if let Some(l) = current
            && !vm.call_method(&l, "is_closed", ())?.try_to_bool(vm)?
        {
            return Ok(l);
        }
        let fresh = vm.call_method(&asyncio, "new_event_loop", ())?;
        *self.event_loop.borrow_mut() = Some(fresh.clone());
        Ok(fresh)
    }

    /// The uncaught exception as the report describes it, each field cut to `bound`.
    fn describe(&self, exc: &PyBaseExceptionRef, bound: usize, vm: &VirtualMachine) -> PythonError {
        let kind = exc.class().name().to_string();
        let message = match exc.as_object().str(vm) {
            Ok(s) => s.to_string_lossy().into_owned(),
            Err(_) => "<exception str() failed>".to_owned(),
        };
        let traceback = self
            .format(exc, bound, vm)
            .unwrap_or_else(|_| format!("{kind}: {}\n", clip(&message, bound)));
        PythonError {
            kind: clip(&kind, bound.min(1024)),
            message: clip(&message, bound),
            traceback: clip(&traceback, bound),
        }
    }

    /// `traceback.format_exception`, joined without growing much past `bound`.
    fn format(
        &self,
        exc: &PyBaseExceptionRef,
        bound: usize,
        vm: &VirtualMachine,
    ) -> PyResult<String> {
        let tb = exc.as_object().get_attr("__traceback__", vm)?;
        let lines = self
            .format_exception
            .call((exc.class().to_owned(), exc.clone(), tb), vm)?;
        let lines = lines
            .downcast::<PyList>()
            .map_err(|_| vm.new_type_error("format_exception"))?;
        let mut out = String::new();
        for line in lines.borrow_vec().iter() {
            if out.len() > bound {
                break;
            }
            if let Some(s) = line.downcast_ref::<PyStr>() {
                out.push_str(&s.to_string_lossy());
            }
        }
        Ok(out)
    }
}

/// `s` cut so that its JSON-escaped form takes at most `bound` bytes, plus a notice of the cut.
fn clip(s: &str, bound: usize) -> String {
    let mut used = 0;
    for (i, c) in s.char_indices() {
        let width = match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        };
        if used + width > bound {
            let rest = s[i..].chars().count();
            return format!("{}... [{rest} more characters cut]", &s[..i]);
        }
        used += width;
    }
    s.to_owned()
}
