# asyncio's event loop as the sandbox can run it, for both engines: the RustPython guest runs this
# source when its snapshot is taken, and the CPython engine's driver carries it (see
# src/sandbox/door.rs). Written once, in the Python both interpreters share.
#
# asyncio's selector loop wakes itself through a socket pair and waits on file descriptors, and
# `asyncio.run` installs a SIGINT handler. The sandbox has no sockets, no signals and no threads, so
# each loop gets a selector with nothing to watch: waiting for the next timer is `time.sleep`, which
# the host's wall-clock limit and cancellation interrupt, and waiting with no timer at all (nothing
# could ever wake the loop) is an error at once, not a hang until the time limit.


def _install_asyncio(sys, time):
    """Adapts `asyncio.selector_events` and `asyncio.runners` as they load: a finder first on
    `sys.meta_path` wraps their loaders, so every route to them (any import statement,
    `importlib`) gets the adapted modules, and nothing is imported before user code asks."""
    sleep = time.sleep

    class Selector:
        """A selector with nothing to watch: the sandbox has no sockets, pipes or subprocesses."""

        def register(self, fileobj, events, data=None):
            raise OSError(
                "file descriptors cannot be watched in this sandbox: it has no sockets, pipes or "
                "subprocesses"
            )

        def unregister(self, fileobj):
            raise KeyError(fileobj)

        modify = register

        def get_key(self, fileobj):
            raise KeyError(fileobj)

        def get_map(self):
            return {}

        def select(self, timeout=None):
            if timeout is None:
                raise RuntimeError(
                    "the event loop is waiting for something nothing in this sandbox can do (it has no "
                    "sockets, threads or subprocesses): every task is waiting and no timer is due"
                )
            if timeout > 0:
                sleep(timeout)
            return []

        def close(self):
            pass

    def nothing(self, *args):
        pass

    def adapt_selector_events(module):
        loop = module.BaseSelectorEventLoop
        init = loop.__init__

        def __init__(self, selector=None):
            init(self, Selector() if selector is None else selector)

        loop.__init__ = __init__
        loop._make_self_pipe = loop._close_self_pipe = loop._write_to_self = nothing

    class NoSignals:
        """What `asyncio.runners` sees as `signal`: no SIGINT handler to install or restore."""

        SIGINT = 2
        default_int_handler = object()

        @staticmethod
        def getsignal(signum):
            return None

    def adapt_runners(module):
        module.signal = NoSignals

    adapters = {
        "asyncio.selector_events": adapt_selector_events,
        "asyncio.runners": adapt_runners,
    }

    class Loader:
        """Runs the real loader, then the adapter; anything else is the real loader's."""

        def __init__(self, inner, adapt):
            self.inner, self.adapt = inner, adapt

        def create_module(self, spec):
            return self.inner.create_module(spec)

        def exec_module(self, module):
            self.inner.exec_module(module)
            self.adapt(module)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    class Finder:
        @classmethod
        def find_spec(cls, name, path=None, target=None):
            adapt = adapters.get(name)
            if adapt is None:
                return None
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if finder is cls or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    spec.loader = Loader(spec.loader, adapt)
                    return spec
            return None

    sys.meta_path.insert(0, Finder)
