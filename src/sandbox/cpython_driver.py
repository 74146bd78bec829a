# The CPython engine's driver (see src/sandbox/door.rs): the guest half of the protocol with the prebuilt CPython reactor,
# which the host cannot rebuild. The host hands this source to the reactor's `turn` export once per
# instance; it leaves `run` as `_safe_python_run` in the turns' own namespace, and every call is
# then one turn of `RUN_TURN`. All traffic with the host goes through the reactor's door
# (`_host.call`, the `host.call` import), one frame per request: an opcode byte, then its payload.
#
# Unlike the RustPython guest's driver, this one is Python in the same interpreter as the code it
# runs, so user code that digs through frames can reach it. It is policy and bookkeeping, not the
# sandbox: the wasm boundary is. The host trusts nothing it sends.


def _install():
    import ast
    import builtins
    import io
    import json
    import linecache
    import sys
    import traceback
    import types

    import _host

    real_import = builtins.__import__
    door = _host.call
    state = {"main": None, "request": None}
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
        used = 0
        for i, c in enumerate(s):
            if c in '"\\\n\r\t\b\f':
                width = 2
            elif ord(c) < 0x20:
                width = 6
            else:
                width = len(c.encode("utf-8", "surrogatepass"))
            if used + width > bound:
                return "%s... [%d more characters cut]" % (s[:i], len(s) - i)
            used += width
        return s

    def host_allows(name):
        try:
            return door(b"I" + name.encode("utf-8")) == b"1"
        except Exception:
            return False

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
        if (
            not is_user_frame(frame)
            or type(name) is not str
            or (letting_through and letting_through[-1] is frame)
        ):
            return real_import(name, globals, locals, fromlist, level)
        shown = clip(name, 200)
        if level != 0:
            refuse("relative imports are not available in this sandbox", shown)
        if not is_module_name(name):
            refuse("'%s' is not a module name this sandbox imports" % shown, shown)
        fromlist = tuple(fromlist) if fromlist is not None else ()
        # `import a.b` binds `a`; `from a.b import x` hands over `a.b`.
        handed = name if fromlist else name.partition(".")[0]
        if not host_allows(handed):
            allowed = ", ".join((state["request"] or {}).get("allowed", ()))
            refuse(
                "import of '%s' is not allowed in this sandbox (allowed: %s)" % (handed, allowed),
                handed,
            )
        letting_through.append(frame)
        try:
            return real_import(name, globals, locals, fromlist, 0)
        finally:
            letting_through.pop()

    builtins.__import__ = checked_import

    def main_globals():
        if state["main"] is None:
            if "random" in sys.modules:
                sys.modules["random"].seed()
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
        tree = compile(source, filename, "exec", ast.PyCF_ONLY_AST)
        reading = None
        if tree.body:
            replacement, reading = rewrite_last(tree.body.pop())
            tree.body.extend(replacement)
        code = compile(tree, filename, "exec")
        try:
            exec(code, globals)
            return read(globals, reading)
        finally:
            for hidden in (result_name, base_name, index_name):
                globals.pop(hidden, None)

    def describe(exc, bound):
        kind = type(exc).__name__
        try:
            message = str(exc)
        except BaseException:
            message = "<exception str() failed>"
        tb = exc.__traceback__
        # The driver's own frame is the first entry: user code starts below it.
        while tb is not None and tb.tb_frame.f_code.co_filename != state["request"]["filename"]:
            tb = tb.tb_next
        try:
            lines = traceback.format_exception(type(exc), exc, tb)
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

    def run():
        # The reactor runs each turn in the `__main__` it finds in `sys.modules`: the user's
        # module takes its place during the call only, so the next turn finds `_safe_python_run`.
        turns_main = sys.modules.get("__main__")
        try:
            call()
        finally:
            sys.modules["__main__"] = turns_main

    def call():
        request = json.loads(door(b"R"))
        state["request"] = request
        bound = request["max_field_bytes"]
        source, filename = request["code"], request["filename"]
        report = {"result": None, "error": None}
        try:
            globals = main_globals()
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            value = execute(source, filename, globals)
            if value is not None:
                report["result"] = clip(repr(value), bound)
        except BaseException as exc:
            report["result"] = None
            report["error"] = describe(exc, bound)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        door(b"P" + json.dumps(report).encode("utf-8", "surrogatepass"))

    driver_codes = frozenset(codes(_install.__code__))
    return run


_safe_python_run = _install()
del _install
