"""Streams read in place between processes of one host (xla_ffi/collectives/engine.h, "Single
copy"): all_gather (leading and inner axes, tiled and not) and all_to_all (split and concat on
the two leading axes of a 3-D block) on blocks of a few hundred KiB to a few MiB, each bitwise
against numpy's model of jax.lax's result; the float32
operands carry -0, quiet NaNs with payloads and a signalling NaN. Odd sizes (rows of 4099 and
9973 elements) put the strided blocks' runs off every page boundary. Then, where a process
has several devices, calls of all_reduce (on the automatic choice, the cascade where the
processes hold runs of ranks, and on mesh) and reduce_scatter (blocks of 300 KiB or more),
whose folds read the blocks of devices of their own process where they lie (and all_reduce's
peers copy the reduced block out of its owner's output): float32 sums of the edge values
(NaNs met in a sum, infinities, -0, the extremes), bfloat16 and float16 sums, int32 sums that
wrap, float32 max, with the input donated (the result written over it) and not, each bitwise
against the rank-order fold of tests/support/process_battery.py.

With --random N, N more calls follow, each an all_gather or all_to_all with a drawn dtype,
shape (1 KiB to 2 MiB per device) and axes (with JACCL_SINGLE_COPY_MIN_KB=1, most of their
blocks go in place, in one chunk or several).

Each rank prints `REDUCTIONS <all_reduces> <reduce_scatters>` (the calls it ran), `RESULT ok`
or `WRONG <detail>`, then `IN_PLACE <n>`: how many streams this process read out of a sender's
memory (jax_jaccl's engine counts them)."""

from __future__ import annotations

from common import start

args, index, count = start(__doc__, {"--random": dict(type=int, default=0)})

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import jax_jaccl as jaccl  # noqa: E402
from jax_jaccl import _ext  # noqa: E402
from process_battery import edge_rows, edge_sum, rank_order_sum  # noqa: E402

n = len(jax.devices())
mesh = jax.make_mesh((n,), ("x",))
rng = np.random.default_rng(7)
wrong = []


def operand(shape, dtype):
    """The global operand (every process draws the same) with float edges in float32."""
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype == np.float32:
        x = rng.standard_normal(shape).astype(np.float32)
        bits = x.reshape(-1).view(np.uint32)
        bits[::97] = 0x80000000   # -0
        bits[1::89] = 0x7fc01234  # a quiet NaN with a payload
        bits[2::83] = 0x7f800001  # a signalling NaN
        return x
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-100, 100, shape).astype(dtype)
    return (rng.standard_normal(shape) * 10).astype(dtype)


def sharded(x):
    return jax.make_array_from_callback(x.shape, NamedSharding(mesh, P("x")), lambda i: x[i])


def check(name, result, expected_of):
    """Every local shard of `result` bitwise against expected_of(position in the mesh)."""
    k = result.shape[0] // n if result.sharding.spec and result.sharding.spec[0] == "x" else None
    for shard in result.addressable_shards:
        position = list(mesh.devices.flat).index(shard.device)
        got = np.asarray(shard.data)
        want = expected_of(position)
        if k is not None:
            assert shard.index[0].start == position * k
        if got.shape != want.shape or got.tobytes() != want.tobytes():
            wrong.append(f"{name} on mesh position {position}")


def blocks(x):
    return np.split(x, n, axis=0)


def run(fn, x, out_spec):
    f = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=out_spec,
                              check_vma=False))
    return f(sharded(x))


for dtype in (np.float32, jnp.bfloat16, np.int8, np.complex64):
    dtype = np.dtype(dtype)
    # all_gather: rows of 4099 elements, 96 per device; gathered on the leading and the inner axis
    x = operand((n * 96, 4099), dtype)
    for axis in (0, 1):
        for tiled in (True, False):
            out = run(lambda v: jaccl.all_gather(v, "x", axis=axis, tiled=tiled), x, P())
            parts = blocks(x)
            want = np.concatenate(parts, axis) if tiled else np.stack(parts, axis)
            check(f"all_gather {dtype} axis={axis} tiled={tiled}", out, lambda _: want)
    # all_to_all of a 3-D block per device: every split and concat axis
    x = operand((n * 8 * n, 3 * n, 9973), dtype)
    for split in range(3):
        for concat in range(3):
            if split == 2 or concat == 2:  # 9973 is prime: the last axis is only carried
                continue
            out = run(lambda v: jaccl.all_to_all(v, "x", split, concat, tiled=True), x, P("x"))

            def want(r, split=split, concat=concat):
                return np.concatenate([np.split(b, n, axis=split)[r] for b in blocks(x)], concat)

            check(f"all_to_all {dtype} split={split} concat={concat}", out, want)

# Reductions: (name, the device rows, their fold in rank order, the collective's op).
length = 150_001 * n  # blocks of 600 KiB of float32, 300 KiB of a 16-bit type
normal = [np.random.default_rng(d).standard_normal(length) for d in range(n)]
wide = [np.random.default_rng(d).integers(-2**31, 2**31, length).astype(np.int32)
        for d in range(n)]
folds = [("float32 edges", edge_rows(np.float32, n, length), edge_sum, "sum"),
         ("bfloat16", [(r * 100).astype(jnp.bfloat16) for r in normal],
          lambda rows: rank_order_sum(rows, jnp.bfloat16), "sum"),
         ("float16", [(r * 100).astype(np.float16) for r in normal],
          lambda rows: rank_order_sum(rows, np.float16), "sum"),
         ("int32", wide, lambda rows: np.sum(rows, axis=0, dtype=np.int32), "sum"),
         ("float32 max", [r.astype(np.float32) for r in normal],
          lambda rows: np.maximum.reduce(rows), "max")]
calls = {"all_reduce": 0, "reduce_scatter": 0}
# all_reduce on the automatic choice (the cascade, where the processes hold runs of ranks) and
# on mesh; reduce_scatter on its automatic choice (mesh).
for name, rows, fold, op in folds if jax.local_device_count() > 1 else ():
    total = fold(rows)
    x = np.concatenate(rows)
    for algorithm, donate in [(a, d) for a in ("auto", "mesh") for d in (False, True)]:
        scatter = op == "sum" and algorithm == "auto"
        f = jax.jit(jax.shard_map(
            lambda v: (jaccl.all_reduce(v, "x", op=op, algorithm=algorithm),)
            + ((jaccl.reduce_scatter(v, "x", tiled=True),) if scatter else ()),
            mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False),
            donate_argnums=(0,) if donate else ())
        got = f(sharded(x))
        check(f"all_reduce {name} {algorithm} donate={donate}", got[0], lambda _: total)
        calls["all_reduce"] += 1
        if scatter:
            parts = np.split(total, n)
            check(f"reduce_scatter {name} donate={donate}", got[1], lambda r: parts[r])
            calls["reduce_scatter"] += 1
print(f"REDUCTIONS {calls['all_reduce']} {calls['reduce_scatter']}", flush=True)

TYPES = [np.dtype(t) for t in (np.float32, jnp.bfloat16, np.float16, np.int8, np.uint16,
                                np.int32, np.complex64, np.bool_)]  # no 64-bit: x64 is off
draw = np.random.default_rng(11)  # every process draws the same calls
for call in range(args.random):
    dtype = TYPES[draw.integers(len(TYPES))]
    rank = int(draw.integers(1, 4))
    dims = [int(draw.choice([1, 2, 3, 5, 7, 64, 127, 1000])) for _ in range(rank)]
    dims[0] *= n
    while np.prod(dims) * dtype.itemsize > (2 << 20):  # halve the largest size
        i = int(np.argmax(dims))
        dims[i] = n * max(1, dims[i] // n // 2) if i == 0 else max(1, dims[i] // 2)
    if draw.random() < 0.5:
        axis = int(draw.integers(rank))
        tiled = bool(draw.random() < 0.5)
        x = operand((n * dims[0], *dims[1:]), dtype)
        out = run(lambda v: jaccl.all_gather(v, "x", axis=axis, tiled=tiled), x, P())
        parts = blocks(x)
        want = np.concatenate(parts, axis) if tiled else np.stack(parts, axis)
        check(f"random {call}: all_gather {dtype}{list(x.shape)} axis={axis} tiled={tiled}", out,
              lambda _: want)
    else:
        split, concat = (int(a) for a in draw.integers(rank, size=2))
        dims[split] = n * max(1, dims[split] // n)
        x = operand((n * dims[0], *dims[1:]), dtype)
        out = run(lambda v: jaccl.all_to_all(v, "x", split, concat, tiled=True), x, P("x"))

        def want(r, x=x, split=split, concat=concat):
            return np.concatenate([np.split(b, n, axis=split)[r] for b in blocks(x)], concat)

        check(f"random {call}: all_to_all {dtype}{list(x.shape)} split={split} concat={concat}",
              out, want)

print("RESULT " + ("ok" if not wrong else "WRONG " + "; ".join(wrong[:5])), flush=True)
print(f"IN_PLACE {_ext.engine.streams_read_in_place()}", flush=True)
