"""The bar for ppermute on one host: the same bytes moved by a plain pipelined copy through
POSIX shared memory, in numpy, no JAX and no jaccl. Two processes swap S bytes, as a shift
between two ranks does: each copies its buffer into a ring the other empties into its own.

Schedule: per direction a ring of SLOTS slots of CHUNK bytes and two counters (chunks written,
chunks read) in one shared segment. Each process alternates between its two roles: it copies
its next chunk into a free slot of its outgoing ring and bumps `written`, and copies the next
chunk that arrived in its incoming ring into place and bumps `read`; when neither can move it
yields the core. x86 keeps stores in order, so a counter is published after the data it
counts. Two copies per byte, like any transfer between processes that do not map each other's
buffers.

Contract: measure(nbytes, reps) -> list of seconds per swap (start to this process holding
the other's bytes and having sent its own), after one warm-up swap; the helper process and the
segment are gone when it returns.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from multiprocessing import shared_memory

import numpy as np

CHUNK = 1 << 20
SLOTS = 4
_LINE = 8  # int64s per cache line: each counter on its own line
_HEADER = 8 * _LINE * 8


def _views(segment):
    counters = np.ndarray((8 * _LINE,), np.int64, buffer=segment.buf[:_HEADER])
    rings = np.ndarray((2, SLOTS, CHUNK), np.uint8, buffer=segment.buf[_HEADER:])
    return counters, rings


def _swap(counters, rings, side, src, dst):
    """One swap as `side` (0 or 1): send src through ring `side`, receive into dst from the
    other. Counters: written[d] at line 2d, read[d] at line 2d + 1 (d: the ring)."""
    chunks = (src.size + CHUNK - 1) // CHUNK
    out, inc = side, 1 - side
    w_out, r_out, w_in, r_in = 2 * out * _LINE, (2 * out + 1) * _LINE, 2 * inc * _LINE, (2 * inc + 1) * _LINE
    sent_base, got_base = counters[w_out], counters[r_in]
    sent = got = 0
    while sent < chunks or got < chunks:
        moved = False
        if sent < chunks and counters[w_out] - counters[r_out] < SLOTS:
            part = src[sent * CHUNK:(sent + 1) * CHUNK]
            rings[out, (sent_base + sent) % SLOTS, :part.size] = part
            counters[w_out] += 1
            sent += 1
            moved = True
        if got < chunks and counters[w_in] > got_base + got:
            part = dst[got * CHUNK:(got + 1) * CHUNK]
            part[:] = rings[inc, (got_base + got) % SLOTS, :part.size]
            counters[r_in] += 1
            got += 1
            moved = True
        if not moved:
            os.sched_yield()


def _partner(name, nbytes, swaps, ready):
    segment = shared_memory.SharedMemory(name=name)
    counters, rings = _views(segment)
    try:
        src, dst = np.full(nbytes, 2, np.uint8), np.zeros(nbytes, np.uint8)
        ready.set()
        for s in range(swaps):
            while counters[6 * _LINE] <= s:  # the measuring side starts each swap
                os.sched_yield()
            _swap(counters, rings, 1, src, dst)
    finally:
        del counters, rings
        segment.close()


def measure(nbytes: int, reps: int) -> list[float]:
    segment = shared_memory.SharedMemory(create=True, size=_HEADER + 2 * SLOTS * CHUNK)
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    partner = ctx.Process(target=_partner, args=(segment.name, nbytes, reps + 1, ready),
                          daemon=True)
    counters, rings = _views(segment)
    try:
        counters[:] = 0
        partner.start()
        if not ready.wait(60):
            raise RuntimeError("shm copy: the partner process did not start")
        src, dst = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
        times = []
        for s in range(reps + 1):
            start = time.perf_counter()
            counters[6 * _LINE] = s + 1
            _swap(counters, rings, 0, src, dst)
            if s:
                times.append(time.perf_counter() - start)
        assert dst[0] == 2 and dst[-1] == 2, "shm copy moved nothing"
        partner.join(60)
        return times
    finally:
        del counters, rings
        if partner.is_alive():
            partner.kill()
        segment.close()
        segment.unlink()
