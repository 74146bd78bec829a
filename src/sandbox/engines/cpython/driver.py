# The CPython engine's driver (see door.rs, beside it): the guest half of the protocol with the prebuilt CPython reactor,
# which the host cannot rebuild. The host hands this source to the reactor's `turn` export once per
# instance; it leaves `run` as `_safe_python_run` in the turns' own namespace, and every call is
# then one turn of `RUN_TURN`. All traffic with the host goes through the reactor's door
# (`_host.call`, the `host.call` import), one frame per request: an opcode byte, then its payload.
#
# Unlike the RustPython guest's driver, this one is Python in the same interpreter as the code it
# runs, so user code that digs through frames can reach it. It is policy and bookkeeping, not the
# sandbox: the wasm boundary is. The host trusts nothing it sends.


def _audit_hook(sys, door, stdlib_files, driver_codes):
    """The audit hook that holds the policy where user code cannot undo it: CPython offers no way
    to remove a hook, and this one's state lives in this scope alone, whose cells no function
    user code can reach refers to. It refuses, to code outside the standard library and the
    driver: loading a module the policy does not allow (the import system's own event, so every
    route into it meets the policy, not only the `__import__` statement), compiling or making
    code under a standard-library file name (which would make it trusted), taking frames (the
    driver's are beneath the user's), and the ways to see every object or every event."""
    # `importlib.import_module` imports for whoever called it.
    machinery = ("<frozen importlib.", "<frozen zipimport>", "/usr/local/lib/python315.zip/importlib/")
    frame_attrs = frozenset(("tb_frame", "gi_frame", "cr_frame", "ag_frame"))
    refused = frozenset(
        (
            "sys._getframe",
            "sys._getframemodulename",
            "sys._current_frames",
            "sys._current_exceptions",
            "sys.settrace",
            "sys.setprofile",
            "sys.monitoring.register_callback",
            "sys.addaudithook",
            "gc.get_objects",
            "gc.get_referrers",
            "gc.get_referents",
        )
    )
    watched = refused | {"import", "compile", "code.__new__", "object.__getattr__"}
    getframe = sys._getframe
    exact = str.__str__
    busy = []

    def is_user(code):
        return code not in driver_codes and not code.co_filename.startswith(stdlib_files)

    def initiator(frame):
        """The frame that asked for an import, beneath the import system's and the driver's
        own; `None` when a module's native code asked while the import system loaded it (a
        load with no other frame between), which is the loading module's import, not the
        user's."""
        while frame is not None and (
            frame.f_code in driver_codes or frame.f_code.co_filename.startswith(machinery)
        ):
            if frame.f_code.co_name == "_load_unlocked":
                return None
            frame = frame.f_back
        return frame

    def allowed(name):
        try:
            return door(b"I" + name.encode("utf-8")) == b"1"
        except Exception:
            return False

    def hook(event, args):
        if busy or event not in watched:
            return
        if event == "object.__getattr__" and args[1] not in frame_attrs:
            return
        busy.append(event)
        try:
            frame = getframe(1)
            if event == "import":
                frame = initiator(frame)
                if frame is None or not is_user(frame.f_code):
                    return
                name = exact(args[0])
                if allowed(name):
                    return
                raise ImportError(
                    "import of '%s' is not allowed in this sandbox" % name[:200], name=name[:200]
                )
            if not is_user(frame.f_code):
                return
            if event in ("compile", "code.__new__"):
                filename = args[1]
                if isinstance(filename, str) and not filename.startswith(stdlib_files):
                    return
                if isinstance(filename, bytes) and not filename.startswith(b"<"):
                    return
                raise RuntimeError("code may not take a standard library file name in this sandbox")
            raise RuntimeError("%s is not available in this sandbox" % event)
        finally:
            busy.pop()

    return hook


def _install():
    import ast
    import builtins
    import importlib.machinery
    import io
    import json
    import linecache
    import logging
    import os
    import sys
    import time
    import traceback
    import types

    import _host

    # Pure-Python halves of native modules, which those import on the user's behalf from native
    # code (`datetime.strptime` imports `_strptime`): loaded here, and allowed with either owner.
    import _strptime

    helpers = {"_strptime": ("datetime", "time")}

    _install_asyncio(sys, time)

    real_import = builtins.__import__
    door = _host.call
    # The driver's code objects, and those of the modules the host provides: trusted, and left
    # out of tracebacks. Filled at the end of this function, and as such modules load.
    driver_codes = set()
    # `loop` runs top-level `await`: one per instance, so a session's tasks and queues live on.
    state = {"main": None, "loop": None}
    result_name, base_name, index_name = "<result>", "<base>", "<index>"

    # Unbuffered text streams over fds 1 and 2, so the host sees output as it is written.
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = io.TextIOWrapper(
            io.FileIO(fd, "w", closefd=False),
            encoding="utf-8",
            errors="backslashreplace",
            write_through=True,
        )
        setattr(sys, name, stream)
        setattr(sys, "__%s__" % name, stream)

    def clip(s, bound):
        """`s` cut to at most `bound` bytes of JSON as the report sends it (UTF-8, not ASCII
        escapes), with lone surrogates, which JSON cannot carry, shown escaped."""
        used = 0
        for i, c in enumerate(s):
            o = ord(c)
            if c in '"\\\n\r\t\b\f':
                width = 2
            elif o < 0x20:
                width = 6
            elif 0xD800 <= o < 0xE000:
                width = 7
            else:
                width = len(c.encode("utf-8"))
            if used + width > bound:
                return "%s... [%d more characters cut]" % (escaped(s[:i]), len(s) - i)
            used += width
        return escaped(s)

    def escaped(s):
        return s.encode("utf-8", "backslashreplace").decode("utf-8")

    def host_answer(name):
        """The host's answer about importing `name`: b"1" allowed, b"2" allowed and provided by
        the host (see `load_host_module`), anything else refused."""
        try:
            return door(b"I" + name.encode("utf-8"))
        except Exception:
            return b"0"

    def host_allows(name):
        return host_answer(name) == b"1"

    def allowed_names():
        """The allowed top-level modules, for the words of a refusal (the host still decides)."""
        try:
            return door(b"A").decode("utf-8")
        except Exception:
            return "?"

    service_ops = (b"M", b"L", b"T", b"W", b"C")

    def service(frame):
        """Sends a service frame (safe_python_protocol::service): what a module the host
        provides gets as `_service`. Only service frames: the driver's own go through `door`."""
        frame = bytes(frame)
        if frame[:1] not in service_ops:
            raise OSError("the host refused this frame")
        try:
            return door(frame)
        except Exception:
            raise OSError("the host refused this frame") from None

    def load_host_module(name):
        """Makes the module `name` from the source the host provides, unless it is loaded: it
        runs as the driver's own code, with `service` as its `_service`."""
        if name in sys.modules:
            return
        source = door(b"M" + name.encode("utf-8")).decode("utf-8")
        code = real_compile(source, "<sandbox %s>" % name, "exec")
        driver_codes.update(codes(code))
        module = types.ModuleType(name)
        module.__dict__["_service"] = service
        sys.modules[name] = module
        try:
            exec(code, module.__dict__)
        except BaseException:
            del sys.modules[name]
            raise

    stdlib_files = ("/usr/local/lib/", "<frozen ", "<reactor>")

    def codes(code):
        yield code
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                yield from codes(const)

    def is_user_frame(frame):
        # Code the import system loaded from the standard library (from the zip, or frozen) is not
        # the user's, nor is the driver's own or the reactor's (`<reactor>`, which runs each
        # turn); anything else is (code from a request, or made at run time). A file name can be
        # forged: on this engine the allowlist is policy, and the wasm boundary the sandbox.
        code = frame.f_code
        if code in driver_codes:
            return False
        return not code.co_filename.startswith(stdlib_files)

    def refuse(message, name):
        raise ImportError(message, name=name)

    name_part = __import__("re").compile(r"[^\W\d]\w*\Z")

    def is_module_name(name):
        return 0 < len(name.encode("utf-8", "surrogatepass")) <= 4096 and all(
            name_part.match(part) for part in name.split(".")
        )

    # The frames whose imports the policy let through and which are still importing: a module's
    # native code imports what it needs with no Python frame of its own, so such an import looks
    # as if the importing frame made it.
    letting_through = []

    def checked_import(name, globals=None, locals=None, fromlist=(), level=0):
        frame = sys._getframe(1)
        if not isinstance(name, str):
            return real_import(name, globals, locals, fromlist, level)
        # A str subclass could answer the policy one name and the import system another.
        name = str.__str__(name)
        if not is_user_frame(frame) or (letting_through and letting_through[-1] is frame):
            return real_import(name, globals, locals, fromlist, level)
        shown = clip(name, 200)
        if level != 0:
            refuse("relative imports are not available in this sandbox", shown)
        if not is_module_name(name):
            refuse("'%s' is not a module name this sandbox imports" % shown, shown)
        fromlist = tuple(fromlist) if fromlist is not None else ()
        # `import a.b` binds `a`; `from a.b import x` hands over `a.b`.
        handed = name if fromlist else name.partition(".")[0]
        answer = host_answer(handed)
        if answer == b"2":
            load_host_module(handed)
        elif answer != b"1" and not any(map(host_allows, helpers.get(handed, ()))):
            refuse(
                "import of '%s' is not allowed in this sandbox (allowed: %s)"
                % (handed, allowed_names()),
                handed,
            )
        letting_through.append(frame)
        try:
            return real_import(name, globals, locals, fromlist, 0)
        finally:
            letting_through.pop()

    builtins.__import__ = checked_import

    real_compile = builtins.compile

    def checked_compile(source, filename, mode, flags=0, dont_inherit=False, optimize=-1, **kw):
        """`compile`, which checks the file name itself: the audit hook sees none when the
        source is an AST, so it refuses such a compile unless it comes from here. The name is
        made an exact `str` once, so what is checked is what the code gets."""
        filename = os.fsdecode(filename)
        filename = str.__str__(filename)
        if filename.startswith(stdlib_files):
            raise RuntimeError("code may not take a standard library file name in this sandbox")
        return real_compile(source, filename, mode, flags, dont_inherit, optimize, **kw)

    builtins.compile = checked_compile

    def main_globals():
        if state["main"] is None:
            # The template may have imported them (preload.rs, beside it): each instance
            # draws its own numbers. numpy's generator takes a full MT19937 key of the host's
            # entropy, which costs half the fuel of its seed() from OS entropy (a SeedSequence):
            # 1.0 M against 2.1 M per fresh call.
            if "random" in sys.modules:
                sys.modules["random"].seed()
            if "numpy.random" in sys.modules:
                numpy = sys.modules["numpy"]
                key = numpy.frombuffer(os.urandom(624 * 4), dtype=numpy.uint32)
                sys.modules["numpy.random"].seed(key)
            module = types.ModuleType("__main__")
            module.__dict__["__builtins__"] = builtins
            state["main"] = module
        sys.modules["__main__"] = state["main"]
        return state["main"].__dict__

    def located(node, at):
        for name in ("lineno", "col_offset", "end_lineno", "end_col_offset"):
            setattr(node, name, getattr(at, name, None))
        return node

    def store(name, value, at):
        return located(ast.Assign(targets=[located(ast.Name(name, ast.Store()), at)], value=value), at)

    def load(name, at):
        return located(ast.Name(name, ast.Load()), at)

    def names_of(target):
        if isinstance(target, ast.Name):
            return target.id
        if isinstance(target, (ast.Tuple, ast.List)) and all(
            isinstance(e, ast.Name) for e in target.elts
        ):
            return tuple(e.id for e in target.elts)
        return None

    def rewrite_last(last):
        """The statements replacing the last one, and how to read its value afterwards: a
        hidden name, a global name, a tuple of names, or nothing."""
        if isinstance(last, ast.Expr):
            return [store(result_name, last.value, last)], result_name
        if isinstance(last, ast.Assign):
            names = names_of(last.targets[0])
            if names is not None:
                return [last], names
            last.value, value = load(result_name, last), last.value
            return [store(result_name, value, last), last], result_name
        if isinstance(last, ast.AnnAssign):
            if last.value is None:
                return [last], None
            names = names_of(last.target)
            if names is not None:
                return [last], names
            last.value, value = load(result_name, last), last.value
            return [store(result_name, value, last), last], result_name
        if isinstance(last, ast.AugAssign):
            target = last.target
            names = names_of(target)
            if names is not None:
                return [last], names
            stmts = [store(base_name, target.value, last)]
            if isinstance(target, ast.Attribute):
                make = lambda ctx: located(ast.Attribute(load(base_name, last), target.attr, ctx), last)
            elif isinstance(target, ast.Subscript) and not isinstance(target.slice, ast.Slice):
                stmts.append(store(index_name, target.slice, last))
                make = lambda ctx: located(
                    ast.Subscript(load(base_name, last), load(index_name, last), ctx), last
                )
            else:
                return [last], None
            stmts.append(store(result_name, make(ast.Load()), last))
            stmts.append(
                located(
                    ast.AugAssign(located(ast.Name(result_name, ast.Store()), last), last.op, last.value),
                    last,
                )
            )
            stmts.append(
                located(ast.Assign(targets=[make(ast.Store())], value=load(result_name, last)), last)
            )
            return stmts, result_name
        return [last], None

    def read(globals, reading):
        if reading is None:
            return None
        if isinstance(reading, tuple):
            return tuple(globals.get(n) for n in reading)
        return globals.get(reading)

    def execute(source, filename, globals):
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        tree = real_compile(source, filename, "exec", ast.PyCF_ONLY_AST | flags)
        reading = None
        if tree.body:
            replacement, reading = rewrite_last(tree.body.pop())
            tree.body.extend(replacement)
        code = real_compile(tree, filename, "exec", flags)
        try:
            if code.co_flags & CO_COROUTINE:
                run_awaiting(code, globals)
            else:
                exec(code, globals)
            return read(globals, reading)
        finally:
            for hidden in (result_name, base_name, index_name):
                globals.pop(hidden, None)

    CO_COROUTINE = 0x80

    def run_awaiting(code, globals):
        """Runs code with a top-level `await` on this instance's event loop, which needs asyncio
        to be allowed, as it would be for `asyncio.run`."""
        if not host_allows("asyncio"):
            raise SyntaxError(
                "top-level 'await' runs on asyncio, which is not allowed in this sandbox "
                "(allowed: %s)" % allowed_names()
            )
        import asyncio

        loop = state["loop"]
        if loop is None or loop.is_closed():
            loop = state["loop"] = asyncio.new_event_loop()
        loop.run_until_complete(eval(code, globals))

    def user_traceback(tb):
        """`tb` without the frames of the driver, of the reactor that runs it and of the files
        shim (`open`, src/sandbox/files.rs): the user's code and what it called, as if it had run
        on its own."""
        kept = []
        while tb is not None:
            code = tb.tb_frame.f_code
            if code not in driver_codes and code.co_filename not in ("<reactor>", "<files>"):
                kept.append(tb)
            tb = tb.tb_next
        result = None
        for entry in reversed(kept):
            result = types.TracebackType(result, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
        return result

    def describe(exc, bound):
        kind = type(exc).__name__
        try:
            message = str(exc)
        except BaseException:
            message = "<exception str() failed>"
        try:
            seen = set()
            chained = exc
            while chained is not None and id(chained) not in seen:
                seen.add(id(chained))
                chained.__traceback__ = user_traceback(chained.__traceback__)
                chained = chained.__cause__ or chained.__context__
            lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
            text = ""
            for line in lines:
                if len(text) > bound:
                    break
                text += line
        except BaseException:
            text = "%s: %s\n" % (kind, clip(message, bound))
        return {
            "type": clip(kind, min(bound, 1024)),
            "message": clip(message, bound),
            "traceback": clip(text, bound),
        }

    # Figures come back as PNG images, one door frame each (see door.rs): matplotlib draws with
    # the driver's backend, named by the environment matplotlib reads when it is imported (so
    # nothing is imported here, which would cost every call), and its `show` sends what is drawn.
    figures_backend = "_safe_python_figures"
    # The long side of a figure as sent, in pixels: a model sees no more, and the host refuses
    # more than 4096.
    max_figure_side = 2048
    figures = {"host_full": False}

    def note(text):
        try:
            sys.__stderr__.write("[%s]\n" % text)
        except BaseException:
            pass

    def render(number, figure):
        """Figure `number` as PNG bytes, scaled down if it is larger than the host takes; empty
        (and a note on stderr) if it cannot be drawn."""
        try:
            width, height = figure.get_size_inches()
            dpi = figure.dpi
            side = max(width, height) * dpi
            if side > max_figure_side:
                dpi = dpi * max_figure_side / side
                note(
                    "figure %d is %dx%d pixels: it is returned scaled down to %dx%d"
                    % (number, width * figure.dpi, height * figure.dpi, width * dpi, height * dpi)
                )
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", dpi=dpi)
            return buffer.getvalue()
        except Exception as exc:
            note("figure %d could not be drawn: %s" % (number, clip(repr(exc), 500)))
            return b""

    def send_figures():
        """Sends each open figure, in the order of their numbers, then closes them all: a figure
        belongs to the call that drew it. Once the host is full, the rest are not drawn but still
        counted (an empty frame each), so the reply can say how many were left out."""
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        for number in pyplot.get_fignums():
            png = b"" if figures["host_full"] else render(number, pyplot.figure(number))
            figures["host_full"] = door(b"G" + png) != b"1"
        pyplot.close("all")

    def end_figures():
        """The end of a call for its figures: whatever is still open is sent."""
        try:
            send_figures()
        except BaseException as exc:
            note("the figures could not be returned: %s" % clip(repr(exc), 500))
        figures["host_full"] = False

    class FiguresBackend:
        """The import system's finder and loader of the backend: matplotlib's Agg, whose `show`
        sends the figures drawn so far (and closes them, so more plotting starts a new one)."""

        @staticmethod
        def find_spec(name, path=None, target=None):
            if name != figures_backend:
                return None
            return importlib.machinery.ModuleSpec(name, FiguresBackend)

        @staticmethod
        def create_module(spec):
            return None

        @staticmethod
        def exec_module(module):
            from matplotlib.backend_bases import FigureManagerBase
            from matplotlib.backends.backend_agg import FigureCanvasAgg

            def show(*args, **kwargs):
                send_figures()

            module.FigureCanvas = FigureCanvasAgg
            module.FigureManager = FigureManagerBase
            module.show = show

    sys.meta_path.append(FiguresBackend)
    os.environ["MPLBACKEND"] = "module://" + figures_backend
    # matplotlib refuses to start without a directory it may write its font cache to, and there
    # is none: its own data folder passes its checks (its matplotlibrc is the default one
    # anyway; src/cpython/stdlib.rs serves it there), and saving the cache there fails, which it
    # only logs, and which is no news.
    os.environ["MPLCONFIGDIR"] = "/usr/local/lib/python315.zip/matplotlib/mpl-data"
    logging.getLogger("matplotlib.font_manager").addFilter(
        lambda record: not str(record.msg).startswith("Could not save font_manager cache")
    )

    def run():
        # The reactor runs each turn in the `__main__` it finds in `sys.modules`: the user's
        # module takes its place during the call only, so the next turn finds `_safe_python_run`.
        turns_main = sys.modules.get("__main__")
        try:
            call()
        finally:
            sys.modules["__main__"] = turns_main

    # JSON costs fuel in the guest (30 k for the smallest report through `json.dumps`): a report
    # with no error is written by hand, its result a string the C encoder quotes.
    quoted = json.encoder.encode_basestring
    encode = json.JSONEncoder(ensure_ascii=False).encode

    def call():
        # The request as door.rs encodes it.
        head, _, rest = door(b"R").partition(b"\n")
        bound, size = map(int, head.split())
        filename, source = rest[:size].decode("utf-8"), rest[size:].decode("utf-8")
        result = error = None
        try:
            globals = main_globals()
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            value = execute(source, filename, globals)
            if value is not None:
                result = clip(repr(value), bound)
        except BaseException as exc:
            result = None
            error = describe(exc, bound)
        end_figures()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        if error is None:
            report = '{"result":%s,"error":null}' % ("null" if result is None else quoted(result))
        else:
            report = encode({"result": None, "error": error})
        door(b"P" + report.encode("utf-8"))

    # The reactor parses, compiles and registers each turn's source before it runs it, and
    # imports `ast` and `linecache` for that: about 460 k fuel, more than the call's own driver
    # work. A call's turn is always `RUN_TURN` (door.rs), so it goes straight to `run`; any other
    # turn (the template's preloads) is the reactor's, as before.
    reactor = sys.modules.get("_reactor")
    reactor_run_turn = getattr(reactor, "_run_turn", None)

    def run_turn(text, name):
        if text == "_safe_python_run()\n":
            return run()
        return reactor_run_turn(text, name)

    if reactor_run_turn is not None:
        reactor._run_turn = run_turn

    driver_codes.update(
        code
        for part in (_install, _audit_hook, _install_asyncio)
        for code in codes(part.__code__)
    )
    sys.addaudithook(_audit_hook(sys, door, stdlib_files, driver_codes))
    return run


_safe_python_run = _install()
del _install, _audit_hook, _install_asyncio
