"""A machine-wide cap on the processes that `jax_processes` jobs run at once, shared by every
pytest of this user on the machine (pytest-xdist's workers, parallel sessions).

Contract: hold_slots(n, limit) is a context manager that waits until the job holds n of the
`limit` process slots (all of them where n > limit: a big job runs alone), and yields the
seconds it waited; the slots are free again when it exits, or when the process holding them
dies (they are flock()ed files in /tmp/jaccl-pytest-slots-<uid>/). limit <= 0: no cap.

Schedule: one job at a time gathers slots (it holds the `gather` lock, so two half-served
jobs never wait on each other), keeping each slot it gets and polling the others until it has
enough; jobs that run hold only their slots, and free them at their end, so the gatherer only
ever waits for running jobs, which their own timeouts bound.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from pathlib import Path

POLL_S = 0.05


def slots_dir() -> Path:
    path = Path(tempfile.gettempdir()) / f"jaccl-pytest-slots-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def _try_lock(path: Path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        os.close(fd)
        return None


@contextlib.contextmanager
def hold_slots(n: int, limit: int):
    if limit <= 0:
        yield 0.0
        return
    want, folder, held = min(n, limit), slots_dir(), {}
    start = time.monotonic()
    try:
        gather = os.open(folder / "gather", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(gather, fcntl.LOCK_EX)
            while len(held) < want:
                for i in range(limit):
                    if i not in held and len(held) < want:
                        fd = _try_lock(folder / f"slot{i}")
                        if fd is not None:
                            held[i] = fd
                if len(held) < want:
                    time.sleep(POLL_S)
        finally:
            os.close(gather)  # closing drops the lock
        yield time.monotonic() - start
    finally:
        for fd in held.values():
            os.close(fd)
