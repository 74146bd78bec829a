"""Call the tools of the MCP servers this sandbox is connected to (code mode).

    tools.SERVER.TOOL(**arguments)            # e.g. tools.time.get_current_time(timezone="UTC")
    tools.call("SERVER", "TOOL", **arguments)  # works whatever the tool's name
    await tools.SERVER.TOOL.acall(**arguments) # under asyncio: independent calls run concurrently
    tools.search("words")                      # tools whose name or description has these words
    help(tools.SERVER.TOOL)                    # its description and input schema

Names become Python identifiers: `-`, `.` and other characters become `_`.

A call returns the tool's structured content (a dict) when the tool gives one; otherwise its
text, several text blocks joined by newlines. A result with other content (images, resources)
comes back as a list of its blocks: `str` for text, `tools.Image` (`.data` bytes, `.mime_type`),
`tools.Resource` (`.uri`, `.text` or `.blob`, `.mime_type`) or `tools.Content` (`.type`, `.raw`).

Errors: `tools.ToolError` when the tool reports one (catch it like any exception);
`PermissionError` for a tool this sandbox may not call; `tools.CallBudgetExceeded` past the
number of calls a run may make; `tools.UpstreamError` when the server is not available or fails
the call; `ValueError` for arguments the host cannot send (not JSON, too large) or a result over
the size limit. Each call counts against the run's time limit.
"""

# This module is the host's (the sandbox's `src/sandbox/tools.py`): the host hands it to the
# guest when code imports `tools`, with `_service`, the function that sends it frames
# (safe_python_protocol::service). The host checks every frame; nothing here is a safeguard.

import builtins as _builtins
import json as _json


class ToolError(Exception):
    """The tool reported an error. `content` holds its result's blocks."""

    def __init__(self, message, content=()):
        super().__init__(message)
        self.content = list(content)


class UpstreamError(ConnectionError):
    """The upstream server is not available, or it failed the call."""


class CallBudgetExceeded(RuntimeError):
    """This run has made as many tool calls as one run may make."""


class Content:
    """A content block of a kind this module has no class for: `.type` and `.raw` (its JSON)."""

    def __init__(self, raw):
        self.raw = raw
        self.type = raw.get("type")

    def __repr__(self):
        return "<tools.Content %s>" % self.type


class Image(Content):
    """An image block: `.data` (bytes) and `.mime_type`."""

    def __init__(self, raw):
        super().__init__(raw)
        import base64

        self.mime_type = raw.get("mimeType")
        self.data = base64.b64decode(raw.get("data") or "")

    def __repr__(self):
        return "<tools.Image %s, %d bytes>" % (self.mime_type, len(self.data))


class Resource(Content):
    """An embedded resource or a resource link: `.uri`, `.mime_type`, and `.text` or `.blob`."""

    def __init__(self, raw):
        super().__init__(raw)
        inner = raw.get("resource") or raw
        self.uri = inner.get("uri")
        self.mime_type = inner.get("mimeType")
        self.text = inner.get("text")
        self.blob = inner.get("blob")

    def __repr__(self):
        return "<tools.Resource %s>" % self.uri


_ERRORS = {
    "refused": PermissionError,
    "budget": CallBudgetExceeded,
    "invalid": ValueError,
    "too_large": ValueError,
    "unavailable": UpstreamError,
    "failed": UpstreamError,
}


# Deeper than the host reads (serde_json stops at 128), and deep enough for any real tool.
_MAX_DEPTH = 100


def _check_depth(value):
    """Refuses arguments nested deeper than `_MAX_DEPTH`, before `json.dumps` recurses into
    them (which overflows the stack long before it raises RecursionError on some engines)."""
    stack = [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list, tuple)):
            if depth > _MAX_DEPTH:
                raise ValueError("tool arguments may be nested at most %d levels deep" % _MAX_DEPTH)
            items = value.values() if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items)


def _send(op, message=None):
    if message is None:
        payload = b""
    else:
        if any(isinstance(v, (dict, list, tuple)) for v in message.get("arguments", {}).values()):
            _check_depth(message)
        try:
            payload = _json.dumps(message, allow_nan=False, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise type(e)("tool arguments must be JSON values: %s" % e) from None
    try:
        answer = _service(op + payload)  # noqa: F821 (the host defines it)
    except OSError as e:
        raise UpstreamError("the sandbox's host refused the request: %s" % e) from None
    answer = _json.loads(answer)
    if "error" in answer and "id" not in answer:
        _raise(answer["error"])
    return answer


def _raise(error):
    raise _ERRORS.get(error.get("kind"), UpstreamError)(error.get("message", "tool call failed"))


def _block(raw):
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "text":
        return raw.get("text", "")
    if kind == "image":
        return Image(raw)
    if kind in ("resource", "resource_link"):
        return Resource(raw)
    return Content(raw if isinstance(raw, dict) else {"type": None, "value": raw})


def _result(done, server, tool):
    if "error" in done:
        _raise(done["error"])
    content = [_block(b) for b in done.get("content") or ()]
    texts = [c for c in content if isinstance(c, str)]
    if done.get("is_error"):
        message = "\n".join(texts) or "the tool reported an error"
        raise ToolError("%s.%s: %s" % (server, tool, message), content)
    if done.get("structured") is not None:
        return done["structured"]
    if len(texts) == len(content):
        return "\n".join(texts)
    return content


def _call_message(server, tool, arguments):
    if not isinstance(server, str) or not isinstance(tool, str):
        raise TypeError("the server and tool are named by strings")
    return {"server": server, "tool": tool, "arguments": arguments}


def _start(server, tool, arguments):
    return _send(b"T", _call_message(server, tool, arguments))["id"]


def call(server, tool, /, **arguments):
    """Calls `tool` of `server` with `arguments` and returns its result (see `tools`)."""
    done = _send(b"C", _call_message(server, tool, arguments))
    return _result(done, server, tool)


async def acall(server, tool, /, **arguments):
    """`call` for asyncio: awaiting it lets other tasks (and their calls) run meanwhile."""
    id = _start(server, tool, arguments)
    return await _Poller.of_running_loop().wait(id, server, tool)


class _Poller:
    """Waits for the calls a loop's tasks await: while the loop has nothing else to do, it waits
    in the host for the first call to finish (or the loop's next timer)."""

    _by_loop = {}

    @classmethod
    def of_running_loop(cls):
        import asyncio

        loop = asyncio.get_running_loop()
        poller = cls._by_loop.get(id(loop))
        if poller is None or poller.loop is not loop:
            poller = cls._by_loop[id(loop)] = cls(loop)
        return poller

    def __init__(self, loop):
        self.loop, self.waiting, self.task = loop, {}, None

    def wait(self, id, server, tool):
        future = self.loop.create_future()
        self.waiting[id] = (future, server, tool)
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self.run())
        return future

    def timeout(self):
        # Another task is ready: only look. A timer is due: wait until then. Neither: wait for a
        # call to finish.
        if getattr(self.loop, "_ready", None):
            return 0
        timers = getattr(self.loop, "_scheduled", None)
        if timers:
            return max(0.0, timers[0].when() - self.loop.time())
        return None

    async def run(self):
        import asyncio

        while self.waiting:
            answer = _send(b"W", {"ids": list(self.waiting), "timeout": self.timeout()})
            for done in answer["done"]:
                future, server, tool = self.waiting.pop(done["id"])
                if future.done():
                    continue
                try:
                    future.set_result(_result(done, server, tool))
                except Exception as e:
                    future.set_exception(e)
            await asyncio.sleep(0)


class _Tool:
    def __init__(self, server, info):
        self.server, self.name, self.info = server, info["name"], info

    def __call__(self, **arguments):
        return call(self.server, self.name, **arguments)

    async def acall(self, **arguments):
        """Calls the tool under asyncio (see `tools.acall`)."""
        return await acall(self.server, self.name, **arguments)

    @property
    def __doc__(self):
        schema = _json.dumps(self.info.get("input_schema"), indent=1, sort_keys=True)
        return "%s\n\n%s\n\nInput schema:\n%s" % (
            self.info["signature"],
            self.info.get("description") or "(no description)",
            schema,
        )

    def __repr__(self):
        return "<tool %s>" % self.info["signature"]


class _Server:
    def __init__(self, entry):
        self.entry = entry
        self.tools = {t["id"]: _Tool(entry["name"], t) for t in entry.get("tools", ())}

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        tool = self.tools.get(name)
        if tool is None:
            tool = _servers(refresh=True).get(self.entry["id"], self).tools.get(name)
        if tool is None:
            raise AttributeError(
                "the server '%s' has no tool '%s' that this sandbox may call (tools: %s)"
                % (self.entry["name"], name, ", ".join(sorted(self.tools)) or "none")
            )
        return tool

    def __dir__(self):
        return sorted(self.tools)

    @property
    def __doc__(self):
        lines = ["MCP server '%s'" % self.entry["name"]]
        if self.entry.get("error"):
            lines.append("not available: %s" % self.entry["error"])
        lines += [t.info["signature"] for t in self.tools.values()]
        return "\n".join(lines)

    def __repr__(self):
        return "<tools server %s: %d tools>" % (self.entry["name"], len(self.tools))


_cache = {}


def _servers(refresh=False):
    if refresh or "servers" not in _cache:
        listed = _send(b"L")["servers"]
        _cache["servers"] = {entry["id"]: _Server(entry) for entry in listed}
    return _cache["servers"]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    server = _servers().get(name) or _servers(refresh=True).get(name)
    if server is None:
        raise AttributeError(
            "no upstream server '%s' (servers: %s)" % (name, ", ".join(sorted(_servers())))
        )
    return server


def __dir__():
    return sorted(set(globals()) - {"_service"} | set(_servers()))


class _Found(list):
    """What `search` found: a list of tools, shown with their full descriptions and schemas."""

    def __repr__(self):
        if not self:
            return "no tool matches"
        return "\n\n".join(tool.__doc__ for tool in self)

    __str__ = __repr__


def search(words, limit=10):
    """The tools (at most `limit`) whose server, name or description has the most of `words`."""
    wanted = [w.lower() for w in str(words).split()]
    scored = []
    for server in _servers().values():
        for tool in server.tools.values():
            text = " ".join(
                (tool.server, tool.name, tool.info.get("description") or "")
            ).lower()
            score = sum(w in text for w in wanted)
            if score or not wanted:
                scored.append((-score, tool.server, tool.name, tool))
    scored.sort(key=lambda s: s[:3])
    return _Found(s[3] for s in scored[:limit])


_real_help = getattr(_builtins, "help", None)


def help(obj=None):
    """Shows a tool's description and input schema (and falls back to Python's own `help`)."""
    if isinstance(obj, (_Tool, _Server)):
        print(obj.__doc__)
    elif _real_help is not None:
        _real_help(obj) if obj is not None else _real_help()
    else:
        print(getattr(obj, "__doc__", None) or repr(obj))


# `help(tools.SERVER.TOOL)` works on either engine, including the one with no `help` of its own.
_builtins.help = help
