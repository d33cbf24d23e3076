"""One message over 2 GiB between two processes (counts past 2^31 bytes: the class of bug where
a transfer's length wraps in 32 bits, as in MLX's TCP ring), as a pytest-plugin job of 2
processes x 1 device on 2 emulated hosts: a ppermute swap of 2 GiB + 4099 bytes over jaccl's
TCP, each byte checked against the peer's pattern. (Through shared memory it passed too, by
hand: the same job with hosts=1.)"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jax_jaccl as jaccl
from job_layouts import TIMEOUT_S

BYTES = (2 << 30) + 4099
CHUNK = 64 << 20
PERIOD = 1_000_003  # a prime: the pattern's period divides no message or chunk size
BASE = np.random.default_rng(0).integers(0, 256, PERIOD, dtype=np.uint8)


def pattern(rank: int, start: int, stop: int) -> np.ndarray:
    """Bytes [start, stop) of `rank`'s message: BASE repeated, shifted by the rank."""
    return np.resize(np.roll(BASE, -((start + 17 * rank) % PERIOD)), stop - start)


@pytest.mark.jax_processes(2, hosts=2, timeout=TIMEOUT_S, env={"JACCL_TRANSPORT": "tcp"},
                           xla_collectives="gloo")
def test_a_ppermute_of_more_than_2_gib(jax_job):
    assert (jax_job.process_count, jaccl.init().host_count) == (2, 2)
    me = jax.process_index()
    mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    local = np.empty(BYTES, np.uint8)
    for start in range(0, BYTES, CHUNK):
        local[start:start + CHUNK] = pattern(me, start, min(start + CHUNK, BYTES))
    x = jax.make_array_from_single_device_arrays(
        (2 * BYTES,), NamedSharding(mesh, P("x")), [jax.device_put(local, jax.local_devices()[0])])
    del local
    swap = jax.jit(jax.shard_map(lambda v: jaccl.ppermute(v, "x", [(0, 1), (1, 0)]), mesh=mesh,
                                 in_specs=P("x"), out_specs=P("x")), donate_argnums=0)
    got = np.asarray(swap(x).addressable_shards[0].data)
    assert got.shape == (BYTES,)
    for start in range(0, BYTES, CHUNK):
        stop = min(start + CHUNK, BYTES)
        if not np.array_equal(got[start:stop], pattern(1 - me, start, stop)):
            wrong = start + int(np.argmax(got[start:stop] != pattern(1 - me, start, stop)))
            raise AssertionError(f"byte {wrong} of {BYTES} is not the peer's")
