"""Where each jaccl collective was written: the call site its frames carry.

Ranks pair their collectives by number (the n-th call of a communicator on one rank meets the
n-th on the others), and every frame says what its sender runs, so ranks that disagree on kind,
shape, dtype or op get "ranks disagree". Two collectives alike in all of these but written in
different places would still pair with each other, and each rank would take the other's data
silently: for instance two programs dispatched in different orders on different processes, or
two independent collectives that XLA runs in different orders. So every custom call also
carries a *site*, fixed at lowering, that the engine puts in its frame headers and compares
(xla_ffi/common/call_sites.h): alike collectives of different sites then stop with "ranks
disagree" naming both places, never with each other's data.

Contract: site_of(ctx, what) returns the 32-bit site of the collective being lowered and tells
the engine its text. A site is made from the user's source line that called the collective
(the innermost frame outside JAX and jaccl: file name without its directory, line, function),
the name stack (jit(step)/transpose(jvp(...)), so a collective and its transpose differ) and
the occurrence of that (line, name stack) in the module (a Python loop calling one line makes
one site per call). Every process that lowers the same program gets the same sites, whatever
directory it runs from. Calls at one site (a function lowered once and called twice, a loop
body run many times) are told apart by their order only. JACCL_CALL_SITES=0 makes every site 0
(calls pair by order only, as before sites existed): for jobs whose processes write one
collective on different lines.
"""

from __future__ import annotations

import os
import weakref
import zlib

from . import _compat, _settings

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_BENCH_DIR = os.path.join(_PACKAGE_DIR, "bench")  # jaccl-bench's programs are users' code

# module -> {(line, name stack) -> collectives lowered there so far}
_occurrences: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_named: set = set()


def _user_frame(traceback):
    """The innermost frame outside JAX and jaccl (jaccl-bench's programs count as user code),
    or None."""
    for frame in _compat.user_frames(traceback):
        path = os.path.abspath(frame.file_name)
        if not path.startswith(_PACKAGE_DIR + os.sep) or path.startswith(_BENCH_DIR + os.sep):
            return frame
    return None


def _place(ctx) -> str:
    frame = _user_frame(getattr(ctx, "traceback", None))
    if frame is None:
        return "an unknown line"
    return f"{os.path.basename(frame.file_name)}:{frame.start_line} in {frame.function_name}"


def site_of(ctx, what: str) -> int:
    """The site of the collective `what` (e.g. "jaccl_all_reduce") being lowered in `ctx`."""
    if not _settings.current().call_sites:
        return 0
    place = _place(ctx)
    stack = str(ctx.name_stack)
    counts = _occurrences.setdefault(ctx.module_context.module, {})
    key = (place, stack)
    occurrence = counts.get(key, 0)
    counts[key] = occurrence + 1
    text = f"{place} [{stack}]" if stack else place
    if occurrence:
        text += f" (collective {occurrence + 1} of that line)"
    site = zlib.crc32(f"{what}|{text}".encode()) or 1  # 0 is "no site"
    if (site, text) not in _named:
        from . import _ext

        _ext.engine.name_site(site, text)
        if _ext.cuda_engine is not None:  # the GPU peer path names sites from its own table
            _ext.cuda_engine.name_site(site, text)
        _named.add((site, text))
    return site
