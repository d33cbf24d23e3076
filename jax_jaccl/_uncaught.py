"""An exception that ends one process of a job ends the job at once, and says which.

Contract: install() (idempotent; for multi-process jobs, from jax_jaccl.distributed.initialize()
and from init()) wraps sys.excepthook. When an exception ends the main thread, the hook first
posts it on jaccl's abort board if the engine runs, so every peer's pending and next jaccl
collective fails within milliseconds with "process P (pid N) failed: it raised KIND: message
(file, line L)" (before jaccl started here: in JAX's key-value store, where peers starting
jaccl look every half second, _kv.py); then Python prints it as usual; then the interpreter's
exit ends the process with status 1 without entering jax.distributed's shutdown barrier, which
would wait for the peers and, when they never come, abort with a stack of its own. Exit hooks
registered after install() still run; the process's own error is the last thing it prints.
"""

from __future__ import annotations

import atexit
import os
import sys
import sysconfig
import threading
import time
import traceback

_lock = threading.Lock()
_installed = False
_uncaught = False


def install() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        previous = sys.excepthook

        def hook(kind, value, tb):
            global _uncaught
            _uncaught = True
            try:
                _post(kind, value, tb)
            finally:  # whatever happens there, the exception itself is printed
                previous(kind, value, tb)

        sys.excepthook = hook
        atexit.register(_at_exit)  # before jax.distributed's own exit hook: registered after it


def describe(kind, value, tb) -> str:
    """"it raised KIND: message (file, line L)", the line being the innermost one of the
    program's own code (not of jax_jaccl, an installed package or Python's library), where it
    has one."""
    frames = traceback.extract_tb(tb)
    libraries = {sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    libraries.add(os.path.dirname(os.path.abspath(__file__)))
    own = [f for f in frames if not any(f.filename.startswith(lib) for lib in libraries if lib)]
    frame = (own or frames or [None])[-1]
    where = f" ({os.path.basename(frame.filename)}, line {frame.lineno})" if frame else ""
    message = str(value).strip().splitlines()[0] if str(value).strip() else ""
    return f"it raised {kind.__name__}{': ' + message if message else ''}{where}"[:900]


def _post(kind, value, tb) -> None:
    from ._ext import engine

    if engine.aborted():  # an earlier failure (a peer's, a deadline) is the cause: keep it
        return
    if engine.is_initialized():
        engine.raise_abort(describe(kind, value, tb))
        return
    try:  # jaccl has not started here: peers waiting to start it learn why from JAX's store
        import jax

        from ._kv import KeyValueStore

        KeyValueStore().post_failure(jax.process_index(), describe(kind, value, tb))
    except Exception:  # noqa: BLE001 - the job is ending anyway; the exception is what matters
        pass


_COORDINATOR_GRACE_S = 1.0


def end_process(process_index: int) -> None:
    """Ends a process of a broken job now, with status 1: the peers learn why first, and
    jax.distributed's shutdown barrier (which would wait for them) is skipped."""
    from ._ext import engine

    engine.flush_aborts(1.0)  # the other hosts learn why before our sockets close
    sys.stdout.flush()
    sys.stderr.flush()
    if process_index == 0:
        # Process 0 runs JAX's coordination service, and JAX ends every other process as soon
        # as it is gone: let them report their own error first.
        time.sleep(_COORDINATOR_GRACE_S)
    os._exit(1)


def _at_exit() -> None:
    if _uncaught:
        import jax

        end_process(jax.process_index())
