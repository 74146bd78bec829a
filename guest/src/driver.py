"""Runs user code inside the guest and describes how it ended.

Loaded once while the snapshot is taken; `run` is then called once per sandbox run, and again for
every further run on the same instance (a session), which shares the first run's `__main__`. It
must not import anything at run time: its globals are not a module's, so the import policy would
apply to it.
"""
import ast
import builtins
import io
import linecache
import os
import random
import sys
import traceback
import types

# The `__main__` of this instance, made by its first run and kept by the later ones.
_main = None


def _no_file_access(file, *args, **kwargs):
    raise PermissionError(13, "file access is not available in this sandbox", file)


builtins.open = _no_file_access
io.open = _no_file_access


# `random.seed(None)` seeds from the interpreter's thread RNG, whose state the snapshot froze: every
# run would draw the same numbers. Seed from WASI's random_get (the host's entropy) instead.
_seed = random.Random.seed


def _seed_from_host(self, a=None, version=2):
    if a is None:
        a = int.from_bytes(os.urandom(32), "big")
    _seed(self, a, version)


random.Random.seed = _seed_from_host


def _text(s):
    """A str that survives UTF-8 encoding (lone surrogates become escapes)."""
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _clip(s, limit):
    if len(s) <= limit:
        return s
    return s[:limit] + "... [%d more characters cut]" % (len(s) - limit)


def _assigned_value(stmt, g):
    """The value a final `x = ...` (or `x: T = ...`, `x += ...`, `a, b = ...`) stored."""
    if isinstance(stmt, ast.Assign):
        target = stmt.targets[0]
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and getattr(stmt, "value", None) is not None:
        target = stmt.target
    else:
        return None
    if isinstance(target, ast.Name):
        return g.get(target.id)
    if isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in target.elts):
        return tuple(g.get(e.id) for e in target.elts)
    # Re-evaluating an attribute or subscript target could run user code twice.
    return None


def _execute(source, filename, g):
    tree = ast.parse(source, filename)
    body = tree.body
    last = body[-1] if body else None
    if isinstance(last, ast.Expr):
        exec(compile(ast.Module(body[:-1], []), filename, "exec"), g)
        return eval(compile(ast.Expression(last.value), filename, "eval"), g)
    exec(compile(tree, filename, "exec"), g)
    return _assigned_value(last, g)


def _describe(exc, filename):
    # Drop the driver's own frames: the traceback starts at the user's code.
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    try:
        message = str(exc)
    except BaseException:
        message = "<exception str() failed>"
    try:
        formatted = "".join(traceback.format_exception(type(exc), exc, tb))
    except BaseException:
        formatted = "%s: %s\n" % (type(exc).__name__, message)
    return _text(type(exc).__name__), _text(message), _text(formatted)


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _first_run():
    global _main
    # The module-level functions are methods bound to `random._inst` before the patch above.
    _seed_from_host(random._inst)
    _main = types.ModuleType("__main__")
    _main.__builtins__ = builtins


def run(source, max_result_chars, filename):
    """Returns (result repr or None, exception type, message, traceback), the last three or None."""
    if _main is None:
        _first_run()
    sys.modules["__main__"] = _main
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        value = _execute(source, filename, _main.__dict__)
        result = None if value is None else _text(_clip(repr(value), max_result_chars))
        return (result, None, None, None)
    except BaseException as exc:
        return (None,) + _describe(exc, filename)
    finally:
        _flush()
