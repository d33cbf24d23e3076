"""Every collective past 2 GiB and past 2^31 elements between two processes (the class of bug
where a length, an offset or a count wraps in 32 bits: MLX's TCP ring had one, as had the mpiabi
library), one job per transport: shared memory (one host), jaccl's TCP and the OFI transport
(libfabric's tcp provider) between two emulated hosts. Each job, 2 processes x 1 device,
runs all_reduce, reduce_scatter, all_gather, all_to_all, ppermute and ragged_all_to_all on
int8 messages of N = 2^31 + 6 elements per process (all_gather's output is 2N), and checks
every byte against a reference built in numpy from the inputs' pattern, a 64 MiB slice at a
time. The pattern's period is a prime, so that a block read from an offset wrapped by 2^31 or
2^32 has other bytes. Peak memory: about 6 GiB a process (all_gather's 2 + 4 GiB); the jobs of
one pytest run one at a time (the process suite has no xdist).

Where the messages cross is the transport the job names (asserted from `jaccl.init()`);
jax.lax takes no part (XLA's own collectives on gloo, which carry no count past 2^31 either)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jax_jaccl as jaccl
from job_layouts import TIMEOUT_S
from transports import OFI, TCP, expected, needs_ofi

N = (1 << 31) + 6          # elements (int8) a process holds: even, so that it splits over 2
CHUNK = 64 << 20
PERIOD = 1_000_003         # a prime: the pattern's period divides no message, chunk or 2^k
BASE = np.random.default_rng(0).integers(-128, 128, PERIOD, dtype=np.int8)
FEW = 3                    # ragged_all_to_all: rows rank 0 keeps (rank 1 keeps all but FEW)


BASE16 = BASE.astype(ml_dtypes.bfloat16).view(np.uint16)  # the MoE rows' (bfloat16 bits)


def pattern(rank: int, start: int, stop: int, base: np.ndarray = BASE) -> np.ndarray:
    """Elements [start, stop) of `rank`'s input: `base` repeated, shifted by the rank."""
    return np.resize(np.roll(base, -((start + 17 * rank) % PERIOD)), stop - start)


def spans(total: int):
    for start in range(0, total, CHUNK):
        yield start, min(start + CHUNK, total)


def check(name: str, got: np.ndarray, size: int, want) -> None:
    """`got` holds `size` elements, each equal to want(start, stop), slice by slice; names the
    first wrong one."""
    assert got.shape == (size,), (name, got.shape, size)
    for start, stop in spans(got.size):
        expect = want(start, stop)
        if not np.array_equal(got[start:stop], expect):
            wrong = start + int(np.argmax(got[start:stop] != expect))
            raise AssertionError(f"{name}: element {wrong} of {got.size} is {got[wrong]}, "
                                 f"not {expect[wrong - start]}")


def piecewise(pieces):
    """want(start, stop) over a concatenation of (length, want_of_piece) pieces."""
    def want(start, stop):
        out, base = [], 0
        for length, of in pieces:
            lo, hi = max(start, base), min(stop, base + length)
            if lo < hi:
                out.append(of(lo - base, hi - base))
            base += length
        return np.concatenate(out)
    return want


def summed(start, stop):
    return pattern(0, start, stop) + pattern(1, start, stop)  # int8 wraps, as the engine's sum


def run(mesh, body, x):
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    return np.asarray(f(x).addressable_shards[0].data).reshape(-1)


def job(name, transport, hosts, marks=()):
    return pytest.param(transport, hosts, id=name, marks=[*marks, pytest.mark.jax_processes(
        2, hosts=hosts, env=transport, timeout=TIMEOUT_S, xla_collectives="gloo")])


@pytest.mark.parametrize("transport, hosts", [job("shm", {}, 1), job("tcp", TCP, 2),
                                              job("ofi", OFI, 2, [needs_ofi])])
def test_every_op_past_2_gib_and_2_31_elements(jax_job, transport, hosts):
    assert (jax_job.process_count, jaccl.init().host_count) == (2, hosts)
    assert jaccl.init().transport == (expected(transport) if hosts > 1 else "none")
    me, half = jax.process_index(), N // 2
    mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))

    local = np.empty(N, np.int8)
    for start, stop in spans(N):
        local[start:stop] = pattern(me, start, stop)
    x = jax.make_array_from_single_device_arrays(   # this process's input, every op's
        (2 * N,), NamedSharding(mesh, P("x")), [jax.device_put(local, jax.local_devices()[0])])
    del local

    check("all_reduce", run(mesh, lambda v: jaccl.all_reduce(v, "x"), x), N, summed)
    check("reduce_scatter", run(mesh, lambda v: jaccl.reduce_scatter(v, "x", tiled=True), x),
          half, lambda a, b: summed(me * half + a, me * half + b))
    check("all_gather", run(mesh, lambda v: jaccl.all_gather(v, "x", tiled=True), x), 2 * N,
          piecewise([(N, lambda a, b: pattern(0, a, b)), (N, lambda a, b: pattern(1, a, b))]))
    check("all_to_all", run(mesh, lambda v: jaccl.all_to_all(v, "x", 0, 0, tiled=True), x), N,
          piecewise([(half, lambda a, b, r=r: pattern(r, me * half + a, me * half + b))
                     for r in (0, 1)]))
    check("ppermute", run(mesh, lambda v: jaccl.ppermute(v, "x", [(0, 1), (1, 0)]), x), N,
          lambda a, b: pattern(1 - me, a, b))

    # ragged_all_to_all over rows of 2 elements: rank 0 sends its first FEW rows to itself and
    # the rest to rank 1, rank 1 all but its last FEW rows to rank 0 and those to itself, so
    # that offsets and sizes in bytes pass 2^31 (rows do not: jax's offsets are int32).
    rows = N // 2
    sizes = np.array([[FEW, rows - FEW], [rows - FEW, FEW]], np.int32)   # [sender, receiver]
    out_at = np.array([[0, 0], [FEW, rows - FEW]], np.int32)             # where it lands
    in_at = np.array([[0, FEW], [0, rows - FEW]], np.int32)

    def ragged(v):
        k = jax.lax.axis_index("x")
        return jaccl.ragged_all_to_all(
            v.reshape(rows, 2), jnp.zeros((rows, 2), jnp.int8), jnp.asarray(in_at)[k],
            jnp.asarray(sizes)[k], jnp.asarray(out_at)[k], jnp.asarray(sizes)[:, k],
            axis_name="x").reshape(-1)

    check("ragged_all_to_all", run(mesh, ragged, x), N,
          piecewise([(2 * int(sizes[r, me]), lambda a, b, r=r: pattern(
              r, 2 * int(in_at[r, me]) + a, 2 * int(in_at[r, me]) + b)) for r in (0, 1)]))

    # MoE: every token to both experts (one a process), so that each expert receives 2 x T rows
    # of H bfloat16 (2 GiB + 32 KiB); the experts scale their rows by 1 and 3, and combine with
    # weights 1/4 and 1/4 gives each token's row back exactly (x/4 + 3x/4 in float32).
    del x
    T, H = (1 << 17) + 1, 4096
    local = np.empty(T * H, np.uint16)
    for start, stop in spans(T * H):
        local[start:stop] = pattern(me, start, stop, BASE16)
    x = jax.make_array_from_single_device_arrays(
        (2 * T, H), NamedSharding(mesh, P("x")),
        [jax.device_put(local.view(ml_dtypes.bfloat16).reshape(T, H), jax.local_devices()[0])])
    del local
    idx = jnp.tile(jnp.arange(2, dtype=jnp.int32), (T, 1))
    weights = jnp.full((T, 2), 0.25, jnp.float32)

    def dispatch(v):
        rows, _, _ = jaccl.moe_dispatch(v, idx, weights, num_experts=2, capacity=2 * T, axis_name="x")
        return rows

    check("moe_dispatch", run(mesh, dispatch, x).view(np.uint16), 2 * T * H, piecewise(
        [(T * H, lambda a, b, r=r: pattern(r, a, b, BASE16)) for r in (0, 1)]))

    def there_and_back(v):
        rows, _, handle = jaccl.moe_dispatch(v, idx, weights, num_experts=2, capacity=2 * T,
                                          axis_name="x")
        scaled = rows * (1 + 2 * jax.lax.axis_index("x")).astype(rows.dtype)
        return jaccl.moe_combine(scaled, handle, weights, axis_name="x")

    check("moe_combine", run(mesh, there_and_back, x).view(np.uint16), T * H,
          lambda a, b: pattern(me, a, b, BASE16))
