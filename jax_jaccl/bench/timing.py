"""How the bench's workers time a jitted program: seconds(f, *args) runs f(*args) once and
waits for every output, returning the wall time. Importing it starts nothing (the workers
start jax_jaccl.distributed themselves)."""

from __future__ import annotations

import time


def seconds(f, *args) -> float:
    import jax

    start = time.perf_counter()
    jax.block_until_ready(f(*args))
    return time.perf_counter() - start
