"""The collective battery of a multi-process job, shared by the worker script
(tests/workers/collectives.py, layouts on emulated hosts) and the pytest plugin's
jobs (tests/plugin/test_battery_as_jobs.py): every collective against jax.lax in the same job,
several dtypes and shapes, each algorithm forced, a 2-D mesh. The reduce-scatter reference is
suite.Lax.psum_scatter (psum, then the device's block, where XLA:CPU's own is unreliable).

Contract: run_battery(compare, hierarchical) runs every check over all of the job's devices and
hands each result to compare(name, got, want, digest) (digest: results that must also be
bitwise equal on every device); `hierarchical` adds the algorithm of several hosts, and the
cascade all_reduce runs where the job's processes hold runs of ranks (processes_hold_runs). Call
it after jax_jaccl.distributed.initialize(), in every process of the job.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import jax_jaccl as jaccl
from jax_jaccl import lax as jlax
from jax_jaccl._ops import _common
from suite import Jaccl, Lax, every_collective, psum_then_block
from util import assert_equal, every_bit_pattern, exact_data


def global_array(local_rows, m, spec=P("x")):
    full = np.concatenate(local_rows)
    return jax.make_array_from_callback(full.shape, NamedSharding(m, spec), lambda i: full[i])


def global_zeros(shape_dtype, m):
    """Zeros of a jax.ShapeDtypeStruct, laid out over `m` as per_device's results are."""
    full = np.zeros(shape_dtype.shape, shape_dtype.dtype)
    return jax.make_array_from_callback(full.shape, NamedSharding(m, P("x")), lambda i: full[i])


def per_device(fn, m, in_spec=P("x"), axes=("x",)):
    body = lambda *a: jax.tree.map(lambda r: r[None], fn(*a))  # noqa: E731
    return jax.jit(jax.shard_map(body, mesh=m, in_specs=in_spec, out_specs=P(axes)))


def shards(a):
    return {s.device.id: np.asarray(s.data) for s in a.addressable_shards}


def assert_equal_shards(name, got, want):
    """Every addressable device's result equals the reference's, bitwise."""
    g, w = shards(got), shards(want)
    for dev in g:
        assert_equal(g[dev], w[dev], err_msg=f"{name} on device {dev}")
    return g


ALL_DTYPES = (np.float32, jnp.bfloat16, np.float16, np.int8, np.uint32, np.bool_)
# Where a layout is there for its transport or placement: the bytes move the same whatever
# they mean, so a 4-byte and a 1-byte type; the algorithms, the sizes that span many frames,
# the 2-D mesh, permutes and ragged stay.
TRANSPORT_DTYPES = (np.float32, np.int8)
FLOAT_DTYPES = (np.float32, jnp.bfloat16, np.float16)  # the float edges' and rank-order sums'


def processes_hold_runs(m) -> bool:
    """Whether the group of the mesh's devices is several processes each holding the same number
    (> 1) of consecutive ranks: the layout all_reduce's cascade algorithm takes (automatically
    above 32 KiB), else mesh or naive."""
    processes = [d.process_index for d in m.devices.flat]
    run = next((i for i, p in enumerate(processes) if p != processes[0]), len(processes))
    runs = [processes[i:i + run] for i in range(0, len(processes), run)]
    return (1 < run < len(processes) and all(r == [r[0]] * run for r in runs)
            and len({r[0] for r in runs}) == len(runs))


def run_battery(compare, hierarchical: bool, dtypes=ALL_DTYPES) -> None:
    """`dtypes` ALL_DTYPES (with the 8-byte and complex types too) or TRANSPORT_DTYPES."""
    n = jax.device_count()
    mesh = jax.make_mesh((n,), ("x",))
    shapes = [(7,), (1024,), (256, 256), (0,)]
    for dtype in dtypes:
        for shape in shapes:
            rows = [exact_data(shape, dtype, seed=d) for d in range(n)]
            x = global_array(rows, mesh)
            got = per_device(lambda v: every_collective(Jaccl, v, dtype, n), mesh)(x)
            reference = per_device(lambda v: every_collective(Lax, v, dtype, n), mesh)
            # XLA rejects most collectives on empty arrays: there, the shapes jax.lax's program
            # would give (an empty array has no values to compare)
            want = reference(x) if shape[0] else jax.tree.map(
                lambda s: global_zeros(s, mesh), jax.eval_shape(reference, x))
            for key in got:
                compare(f"{np.dtype(dtype).name}/{shape}/{key}", got[key], want[key],
                        digest=key.startswith(("all_reduce", "all_gather")))

    with jax.enable_x64(True):
        for dtype in (np.float64, np.int64, np.complex64) if dtypes == ALL_DTYPES else ():
            rows = [exact_data((33,), dtype, seed=d) for d in range(n)]
            x = global_array(rows, mesh)
            got = per_device(lambda v: every_collective(Jaccl, v, dtype, n), mesh)(x)
            want = per_device(lambda v: every_collective(Lax, v, dtype, n), mesh)(x)
            for key in got:
                compare(f"{np.dtype(dtype).name}/{key}", got[key], want[key])

    # Each algorithm forced, sizes that span many frames and odd ones.
    for size in (5, 300_007):
        rows = [exact_data((size * n,), np.int32, seed=d) for d in range(n)]
        x = global_array(rows, mesh)
        algorithms = (["naive", "mesh", "ring", "ring_oneway"]
                      + (["hierarchical"] if hierarchical else [])
                      + (["cascade"] if processes_hold_runs(mesh) else []))
        for algorithm in algorithms:
            ours = per_device(lambda v: jaccl.all_reduce(v, "x", algorithm=algorithm), mesh)(x)
            theirs = per_device(lambda v: jax.lax.psum(v, "x"), mesh)(x)
            compare(f"all_reduce/{algorithm}/{size}", ours, theirs, digest=True)
            if algorithm in ("naive", "cascade"):  # all_reduce's alone
                continue
            ours = per_device(lambda v: jaccl.reduce_scatter(v, "x", tiled=True, algorithm=algorithm), mesh)(x)
            theirs = per_device(lambda v: Lax.psum_scatter(v, "x", tiled=True), mesh)(x)
            compare(f"reduce_scatter/{algorithm}/{size}", ours, theirs)
            if algorithm == "hierarchical":
                continue
            ours = per_device(lambda v: jaccl.all_gather(v, "x", tiled=True, algorithm=algorithm), mesh)(x)
            theirs = per_device(lambda v: jax.lax.all_gather(v, "x", tiled=True), mesh)(x)
            compare(f"all_gather/{algorithm}/{size}", ours, theirs, digest=True)

    # A 2-D mesh: collectives over one axis run in each group independently.
    if n % 2 == 0 and n >= 4:
        mesh2 = jax.make_mesh((n // 2, 2), ("a", "b"))
        # 3n columns per device: every group (n / 2, 2 or n devices) divides them.
        data = np.random.default_rng(0).integers(-9, 9, size=(n // 2 * 4, 2 * 3 * n)).astype(np.int32)
        x2 = jax.make_array_from_callback(data.shape, NamedSharding(mesh2, P("a", "b")),
                                          lambda i: data[i])
        for axes in ("a", "b", ("a", "b")):
            for name, ours, theirs in [
                ("all_reduce", lambda v: jaccl.all_reduce(v, axes), lambda v: jax.lax.psum(v, axes)),
                ("reduce_scatter", lambda v: jaccl.reduce_scatter(v, axes, scatter_dimension=1, tiled=True),
                 lambda v: Lax.psum_scatter(v, axes, scatter_dimension=1, tiled=True)),
                ("all_gather", lambda v: jaccl.all_gather(v, axes, tiled=True),
                 lambda v: jax.lax.all_gather(v, axes, tiled=True)),
            ]:
                run = lambda fn: jax.jit(jax.shard_map(fn, mesh=mesh2, in_specs=P("a", "b"),  # noqa: E731
                                                       out_specs=P("a", "b")))(x2)
                compare(f"mesh2d/{axes}/{name}", run(ours), run(theirs))

    run_permutes_ragged_and_partly_manual(compare, n, mesh)
    if dtypes == ALL_DTYPES:
        run_narrow(compare, n, mesh)
    floats = [d for d in FLOAT_DTYPES if d in dtypes]
    run_float_edges(compare, n, mesh, floats)
    run_rank_order_sums(compare, n, mesh, floats)
    if np.float32 in floats:
        run_edge_sums(compare, n, mesh)
        run_flushed_sums(compare, n, mesh)


def run_narrow(compare, n, mesh) -> None:
    """The narrow types (every float8, int4, uint4, float4_e2m1fn: jax_jaccl's _common.NARROW)
    through jax_jaccl.lax's collectives against jax.lax's, bit for bit: every bit pattern through
    the ops that move elements, n rows of 8 a device (sub-byte types packed two to a byte); the
    reductions without NaNs (XLA's own max, min and sum of a NaN differ between its in-process
    collectives and gloo's; tests/in_process/test_narrow_dtypes.py pins them against the
    former), and float8_e8m0fnu without 2^-127, a float32 subnormal, where XLA:CPU's long max
    and min differ (tests/in_process/test_float_edges.py). Two programs a type."""
    shift = [(i, (i + 1) % n) for i in range(n)]

    def moves(L):
        return lambda v: {"all_gather": L.all_gather(v, "x", tiled=True),
                          "all_to_all": L.all_to_all(v, "x", 1, 1, tiled=True),
                          "ppermute": L.ppermute(v, "x", shift)}

    def reductions(L):
        scatter = (lambda v: L.psum_scatter(v, "x", scatter_dimension=1, tiled=True)) if L is jlax \
            else (lambda v: psum_then_block(v, "x", scatter_dimension=1, tiled=True))
        return lambda v: {"psum": L.psum(v, "x"), "pmax": L.pmax(v, "x"), "pmin": L.pmin(v, "x"),
                          "psum_scatter": scatter(v)}

    for dtype in _common.NARROW:
        data = every_bit_pattern(dtype, (n * n, 8), seed=dtype.itemsize + len(dtype.name))
        finite = np.where(np.isnan(data.astype(np.float32)), np.zeros_like(data), data)
        if dtype.name == "float8_e8m0fnu":
            finite = np.maximum(finite.view(np.uint8), 1).view(dtype)
        for kind, values in ((moves, data), (reductions, finite)):
            x = global_array(list(values.reshape(n, n, 8)), mesh)
            got, want = (per_device(kind(L), mesh)(x) for L in (jlax, jax.lax))
            for key in got:
                compare(f"{dtype.name}/{key}", got[key], want[key])


def run_permutes_ragged_and_partly_manual(compare, n, mesh) -> None:
    """ragged_all_to_all against the numpy model (two slices per pair, random sizes and gaps),
    the permutations jax.lax.ppermute accepts, and collectives in a shard_map manual over one
    axis of a 2-D mesh (the other left to XLA) against jax.lax there."""
    import ragged_model

    args = ragged_model.random_arguments(np.random.default_rng(21), n, 2, in_rows=40,
                                         out_rows=64, row_shape=(3,))
    want = ragged_model.ragged_all_to_all(*args)
    operands, outputs = (global_array(list(a), mesh) for a in args[:2])
    indices = [global_array(list(np.asarray(v, np.int32)), mesh) for v in args[2:]]
    got = jax.jit(jax.shard_map(lambda *a: jaccl.ragged_all_to_all(*a, axis_name="x"),
                                mesh=mesh, in_specs=(P("x"),) * 6, out_specs=P("x")))(
        operands, outputs, *indices)
    compare("ragged_all_to_all/2-slices", got, global_array(want, mesh))

    x = global_array([exact_data((5, 3), np.float32, seed=d) for d in range(n)], mesh)
    for name, perm in [("reverse", [(i, n - 1 - i) for i in range(n)]),
                       ("one pair", [(n - 1, 0)]), ("cycle", [(i, (i + 2) % n) for i in range(n)])]:
        ours = per_device(lambda v: jaccl.ppermute(v, "x", perm), mesh)(x)
        theirs = per_device(lambda v: jax.lax.ppermute(v, "x", perm), mesh)(x)
        compare(f"ppermute/{name}", ours, theirs)

    if n % 2 or n < 4:
        return
    auto = (jax.sharding.AxisType.Auto,) * 2
    mesh2 = jax.make_mesh((n // 2, 2), ("a", "b"), axis_types=auto)
    data = np.random.default_rng(3).integers(-9, 9, size=(n, 8)).astype(np.float32)
    x2 = jax.make_array_from_callback(data.shape, NamedSharding(mesh2, P("a", "b")),
                                      lambda i: data[i])
    for name, ours, theirs in [
        ("all_reduce", lambda v: jaccl.all_reduce(v, "b"), lambda v: jax.lax.psum(v, "b")),
        ("all_gather", lambda v: jaccl.all_gather(v, "b", axis=1, tiled=True)[:, ::2],
         lambda v: jax.lax.all_gather(v, "b", axis=1, tiled=True)[:, ::2]),
        ("ppermute", lambda v: jaccl.ppermute(v, "b", [(0, 1)]),
         lambda v: jax.lax.ppermute(v, "b", [(0, 1)])),
    ]:
        # XLA shards the results over "a" as it likes: compare them laid out alike
        run = lambda fn: jax.jit(jax.shard_map(fn, mesh=mesh2, in_specs=P(None, "b"),  # noqa: E731
                                               out_specs=P(None, "b"), axis_names={"b"}),
                                 out_shardings=NamedSharding(mesh2, P("a", "b")))(x2)
        compare(f"partly-manual/{name}", run(ours), run(theirs))


# Bit patterns a copy must carry unchanged: -0, quiet NaNs with payloads and signs, a signalling
# NaN (arithmetic would quiet it), infinities, the least subnormal, the greatest finite value.
EDGE_BITS = {
    np.dtype(np.float32): (np.uint32, [0x80000000, 0x7FC12345, 0xFFC00001, 0x7F800001, 0x7F800000,
                                       0xFF800000, 0x00000001, 0x7F7FFFFF, 0x3F800000]),
    np.dtype(jnp.bfloat16): (np.uint16, [0x8000, 0x7FC1, 0xFFC1, 0x7F81, 0x7F80, 0xFF80, 0x0001,
                                         0x7F7F, 0x3F80]),
    np.dtype(np.float16): (np.uint16, [0x8000, 0x7E01, 0xFE01, 0x7C01, 0x7C00, 0xFC00, 0x0001,
                                       0x7BFF, 0x3C00]),
}


def edge_rows(dtype, n, length):
    """Device d's row: EDGE_BITS of `dtype` repeated from position d, `length` elements."""
    unsigned, bits = EDGE_BITS[np.dtype(dtype)]
    pattern = np.array(bits, unsigned)
    return [np.resize(np.roll(pattern, -d), length).view(dtype) for d in range(n)]


def run_float_edges(compare, n, mesh, dtypes=FLOAT_DTYPES) -> None:
    """The collectives that move elements without reducing them keep every bit (-0 stays -0, a
    NaN keeps its payload, a signalling NaN stays signalling), on every algorithm, within one
    frame and across many: checked against numpy's copies of the inputs, not against another
    collective (jax.lax's may run on jaccl's engine too). `dtypes`: some of FLOAT_DTYPES."""
    cases = [(np.float32, 9 * n), (np.float32, 150_001 * n),  # 1 and 2+ frames
             (jnp.bfloat16, 9 * n), (np.float16, 9 * n)]
    for dtype, length in [(d, k) for d, k in cases if d in dtypes]:
        rows = edge_rows(dtype, n, length)
        x = global_array(rows, mesh)
        every = np.concatenate(rows)
        name = f"edges/{np.dtype(dtype).name}/{length}"
        blocks = [np.split(r, n) for r in rows]
        shift = [(i, (i + 1) % n) for i in range(n)]
        got = per_device(lambda v: {  # one program: one compilation per case
            "all_gather/mesh": jaccl.all_gather(v, "x", tiled=True, algorithm="mesh"),
            "all_gather/ring": jaccl.all_gather(v, "x", tiled=True, algorithm="ring"),
            "all_to_all": jaccl.all_to_all(v, "x", 0, 0, tiled=True),
            "ppermute": jaccl.ppermute(v, "x", shift)}, mesh)(x)
        want = {"all_gather/mesh": [every] * n, "all_gather/ring": [every] * n,
                "all_to_all": [np.concatenate([blocks[q][d] for q in range(n)]) for d in range(n)],
                "ppermute": [rows[(d - 1) % n] for d in range(n)]}
        for key, per_rank in want.items():
            compare(f"{name}/{key}", got[key], global_array([w[None] for w in per_rank], mesh))
        # ragged_all_to_all: block d of every sender lands at block q of receiver d
        size = length // n
        offsets = np.arange(n, dtype=np.int32) * size
        sizes = np.full(n, size, np.int32)
        per = lambda a: global_array([np.asarray(a)] * n, mesh)  # noqa: E731
        output_offsets = [np.full(n, d * size, np.int32) for d in range(n)]
        got = jax.jit(jax.shard_map(lambda *a: jaccl.ragged_all_to_all(*a, axis_name="x"),
                                    mesh=mesh, in_specs=(P("x"),) * 6, out_specs=P("x")))(
            x, global_array([np.zeros(length, dtype)] * n, mesh), per(offsets), per(sizes),
            global_array(output_offsets, mesh), per(sizes))
        compare(f"{name}/ragged_all_to_all", got, global_array(
            [np.concatenate([blocks[q][d] for q in range(n)]) for d in range(n)], mesh))


def edge_sum(rows):
    """XLA:CPU's float32 psum of `rows`, from the CPU's adds in rank order (numpy's): -0 + -0 is
    +0 after the fold's +0, inf - inf the machine's default NaN, a signalling NaN quieted; where
    two NaNs meet, the later operand's NaN, quieted (numpy's add keeps the earlier one's)."""
    acc = np.zeros_like(rows[0])
    for row in rows:
        both = np.isnan(acc) & np.isnan(row)
        with np.errstate(invalid="ignore"):
            acc = acc + row
        acc[both] = (row.view(np.uint32)[both] | np.uint32(0x400000)).view(np.float32)
    return acc


def run_edge_sums(compare, n, mesh) -> None:
    """all_reduce and reduce_scatter of the float32 edge rows (NaN payloads of both signs, a
    signalling NaN, infinities, -0, the largest and the smallest float), every device's row
    rolled by its rank, within one frame and across many: bitwise against edge_sum on every
    rank (a block's owner and the peers it sends the block to had better agree)."""
    for length in (9 * n, 150_001 * n):
        rows = edge_rows(np.float32, n, length)
        total = edge_sum(rows)
        name = f"edge-sums/float32/{length}"
        got = per_device(lambda v: (jaccl.all_reduce(v, "x"),
                                    jaccl.reduce_scatter(v, "x", tiled=True)), mesh)(
            global_array(rows, mesh))
        compare(f"{name}/all_reduce", got[0], global_array([total[None]] * n, mesh))
        compare(f"{name}/reduce_scatter", got[1],
                global_array([b[None] for b in np.split(total, n)], mesh))


def run_flushed_sums(compare, n, mesh) -> None:
    """float32 sums whose running sum underflows on the way (XLA:CPU flushes it to -0) and
    then meets only -0s (the first half of each row), or is met by +0s first (the second
    half): -0 on every rank, as jax.lax's, on the automatic choice and on each algorithm that
    folds in rank order, across many frames (one program). A fold that passes its running sum
    on (the cascade, between processes) must pass the -0 on: a fold that started again from
    +0 would make it +0. On GPUs (jaccl's CUDA handlers, emulated ones too), which keep
    subnormals (xla_ffi/common/reduce_apply.h), the subnormal sum."""
    pair = [np.float32(1.4e-38), np.float32(-1.5e-38)]
    on_gpu = jax.devices()[0].platform == "gpu" or bool(os.environ.get("JACCL_TEST_EMULATED_CUDA"))
    want = pair[0] + pair[1] if on_gpu else np.float32(-0.0)
    flushed_first = pair + [np.float32(-0.0)] * (n - 2)
    zeros_first = [np.float32(0.0)] * (n - 2) + pair
    half = 150_001 * n
    rows = [np.concatenate([np.full(half, flushed_first[d]), np.full(half, zeros_first[d])])
            for d in range(n)]
    algorithms = ["auto", "naive", "mesh"] + (["cascade"] if processes_hold_runs(mesh) else [])
    got = per_device(lambda v: {a: jaccl.all_reduce(v, "x", algorithm=a) for a in algorithms},
                     mesh)(global_array(rows, mesh))
    for algorithm in algorithms:
        compare(f"flushed/{algorithm}", got[algorithm],
                global_array([np.full((1, 2 * half), want, np.float32)] * n, mesh))


def rank_order_sum(rows, dtype):
    """XLA:CPU's psum of `rows`: a fold from +0 in rank order, float16 rounded after every
    addition, bfloat16 accumulated in float32 and rounded once."""
    if np.dtype(dtype) == np.float16:
        acc = np.zeros_like(rows[0])
        for row in rows:
            acc = (acc + row).astype(np.float16)
        return acc
    acc = np.zeros(rows[0].shape, np.float32)
    for row in rows:
        acc = acc + row.astype(np.float32)
    return acc.astype(dtype)


def run_rank_order_sums(compare, n, mesh, dtypes=FLOAT_DTYPES) -> None:
    """psum and psum_scatter of random values, whose sums round differently in every order,
    bitwise against the fold in rank order (the rest of the battery sums exact values, which
    any order gets right), within one frame and across many. `dtypes`: some of FLOAT_DTYPES."""
    for dtype in dtypes:
        for count in (250 * n, 150_001 * n):
            rows = [np.random.default_rng(100 + d).normal(size=count).astype(dtype) for d in range(n)]
            x = global_array(rows, mesh)
            total = rank_order_sum(rows, dtype)
            name = f"rank-order/{np.dtype(dtype).name}/{count}"
            got = per_device(lambda v: (jaccl.all_reduce(v, "x"),
                                        jaccl.reduce_scatter(v, "x", tiled=True)), mesh)(x)
            compare(f"{name}/all_reduce", got[0], global_array([total[None]] * n, mesh), digest=True)
            compare(f"{name}/reduce_scatter", got[1],
                    global_array([b[None] for b in np.split(total, n)], mesh))
