"""The collective battery on GPUs, run by pytest (test_gpu.py) or in a job's processes
(`tests/workers/gpu.py collectives`).

Every collective of tests/support/suite.py (each op, tiled and untiled, split along the first
and a later dimension) runs with jaccl on the GPUs of the job and, as the reference, with
jax.lax on as many CPU devices of this process, on exact data: results must be equal, not
close. In one process the battery also runs with jax.lax on the GPUs. expect_path() checks
which path the handlers took (the counts come from _jaccl_cuda). Prints `OK <checks> ...` at
the end."""

from __future__ import annotations

import os

import numpy as np


def visible_gpus() -> int:
    """The GPUs this process will see, counted without starting JAX (CUDA_VISIBLE_DEVICES, else
    the driver's list); 0 without a driver."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return len([d for d in listed.split(",") if d.strip() and not d.strip().startswith("-")])
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def reference_devices(minimum: int) -> int:
    """CPU devices enough for jax.lax's reference of every GPU of the job (each process of a
    job sees the machine's GPUs: JACCL_NUM_PROCESSES of them), at least `minimum`; to set
    before JAX starts its backends."""
    return max(minimum, visible_gpus() * int(os.environ.get("JACCL_NUM_PROCESSES", "1")))


# The last shape is large (4-byte types only): several JACCL_CUDA_BUFFER_MB chunks of a message.
SHAPES = [(7,), (65_537,), (6, 40), (1024, 1024)]


def gpu_reason():
    try:
        import jax

        return None if jax.devices("gpu") else "no GPU"
    except Exception as e:  # noqa: BLE001
        return f"JAX has no GPU backend here (jax.devices('gpu') raised {type(e).__name__})"


def dtypes():
    import jax.numpy as jnp

    return [np.float32, jnp.bfloat16, np.float16, np.int32, np.int8, np.uint8, np.bool_]


def battery(impl, devices, shape, dtype):
    """{name: {mesh position: that device's result}} for the devices this process holds."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    from suite import every_collective
    from util import blocks, exact_data

    n = len(devices)
    mesh = Mesh(np.array(devices), ("x",))
    whole = np.concatenate([exact_data(shape, dtype, seed=i) for i in range(n)])
    x = jax.make_array_from_callback(whole.shape, NamedSharding(mesh, P("x")), lambda i: whole[i])
    per_device = lambda v: jax.tree.map(lambda r: r[None], every_collective(impl, v, dtype, n=n))  # noqa: E731
    out = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(x)
    return {name: {position: block[0] for position, block in blocks(a).items()}
            for name, a in out.items()}


def check_all(verbose=True, devices=None, reference=None, lax_on_devices=None, shapes=SHAPES,
              types=None):
    """Runs the battery on `devices` (default: every GPU of the job) against jax.lax on
    `reference` (default: as many CPU devices of this process); returns the checks made.
    `shapes`: SHAPES, or a list of the same kind (the last one large); `types`: dtypes() or
    some of them."""
    import jax

    from suite import Jaccl, Lax
    from util import assert_equal

    devices = devices or jax.devices("gpu")
    n = len(devices)
    reference = reference or jax.local_devices(backend="cpu")[:n]
    assert len(reference) == n, f"need {n} CPU devices for the reference, have {len(reference)}"
    if lax_on_devices is None:
        lax_on_devices = jax.process_count() == 1
    checked = 0
    for dtype in types or dtypes():
        for shape in shapes:
            if shape == shapes[-1] and np.dtype(dtype).itemsize != 4:
                continue
            got = battery(Jaccl, devices, shape, dtype)
            references = [battery(Lax, reference, shape, dtype)]
            if lax_on_devices:
                references.append(battery(Lax, devices, shape, dtype))
            for want in references:
                assert got.keys() == want.keys()
                for name, results in got.items():
                    for position, result in results.items():
                        assert_equal(result, want[name][position],
                                     err_msg=f"{name} {np.dtype(dtype).name} {shape} device {position}")
                        checked += 1
    checked += check_forced_algorithms(devices)
    checked += check_two_axes(devices, reference)
    checked += check_float_edges(devices, reference)
    checked += check_ragged(devices, lax_on_devices)
    if verbose:
        print(f"OK {checked} checks on {n} {devices[0].platform} device(s), process "
              f"{jax.process_index()} of {jax.process_count()}", flush=True)
    return checked


def check_ragged(devices, lax_on_devices):
    """ragged_all_to_all (staged through host memory: it has no peer path, so not with
    JACCL_CUDA_PATH=peer) against the numpy model of jax.lax's semantics and, on real GPUs
    where jax.lax can run (`lax_on_devices`: not two processes sharing one GPU, which NCCL
    refuses), against jax.lax.ragged_all_to_all itself, int32 and bfloat16 rows, two slices
    per pair."""
    if os.environ.get("JACCL_CUDA_PATH") == "peer":
        return 0
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import jax_jaccl as jaccl
    import ragged_model
    from util import blocks

    n = len(devices)
    mesh = Mesh(np.array(devices), ("x",))
    put = lambda parts: jax.make_array_from_callback(  # noqa: E731
        (sum(p.shape[0] for p in parts),) + parts[0].shape[1:], NamedSharding(mesh, P("x")),
        lambda i, whole=np.concatenate(parts): whole[i])
    checked = 0
    for dtype in (np.int32, jnp.bfloat16):
        args = ragged_model.random_arguments(np.random.default_rng(9), n, 2, in_rows=30,
                                             out_rows=50, row_shape=(5,), dtype=dtype)
        want = ragged_model.ragged_all_to_all(*args)
        operands = (put(args[0]), put(args[1]),
                    *(put(list(np.asarray(v, np.int32))) for v in args[2:]))
        rows = want[0].shape[0]
        impls = [jaccl.ragged_all_to_all]
        if devices[0].platform == "gpu" and lax_on_devices:  # XLA:CPU has no ragged_all_to_all
            impls.append(jax.lax.ragged_all_to_all)
        for impl in impls:
            f = jax.jit(jax.shard_map(lambda *a, impl=impl: impl(*a, axis_name="x"),
                                      mesh=mesh, in_specs=(P("x"),) * 6, out_specs=P("x")))
            for start, block in blocks(f(*operands)).items():
                np.testing.assert_array_equal(
                    np.asarray(block, np.float32), np.asarray(want[start // rows], np.float32),
                    err_msg=f"{impl.__module__} ragged_all_to_all {np.dtype(dtype).name}")
                checked += 1
    return checked


def check_forced_algorithms(devices):
    """all_reduce one-shot on a large message and two-shot on a small one, in place too."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import jax_jaccl as jaccl

    n = len(devices)
    mesh = Mesh(np.array(devices), ("x",))
    checked = 0
    for algorithm in ("naive", "mesh"):
        for size in (3, 300_001):
            whole = np.arange(n * size, dtype=np.float32) % 13
            x = jax.make_array_from_callback(whole.shape, NamedSharding(mesh, P("x")),
                                             lambda i: whole[i])
            f = jax.jit(jax.shard_map(lambda v: jaccl.all_reduce(v, "x", algorithm=algorithm),
                                      mesh=mesh, in_specs=P("x"), out_specs=P("x")),
                        donate_argnums=0)
            want = whole.reshape(n, size).sum(0)
            for s in f(x).addressable_shards:
                np.testing.assert_array_equal(np.asarray(s.data), want, err_msg=f"{algorithm} {size}")
                checked += 1
    return checked


def check_two_axes(devices, reference):
    """A 2 x n/2 mesh (an even n >= 4, else nothing to do): collectives over one axis (several
    groups at once, rows then columns in one program) and over both, against jax.lax."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    from suite import Jaccl, Lax
    from util import blocks

    n = len(devices)
    if n < 4 or n % 2:
        return 0
    whole = (np.arange(n * 12, dtype=np.float32).reshape(2, n // 2, 12) % 7) - 3

    def per_device(impl):
        def fn(v):
            rows = impl.reduce(v, "sum", "b")
            columns = impl.reduce(rows * v, "max", "a")
            both = impl.reduce(v, "sum", ("a", "b"))
            scattered = impl.psum_scatter(jnp.concatenate([v] * (n // 2)), "b", tiled=True)
            gathered = impl.all_gather(v, "a", tiled=True)
            return tuple(r.reshape((1, -1)) for r in (rows, columns, both, scattered, gathered))
        return fn

    def run(impl, devs):
        mesh = Mesh(np.array(devs).reshape(2, n // 2), ("a", "b"))
        x = jax.make_array_from_callback(whole.shape, NamedSharding(mesh, P("a", "b")),
                                         lambda i: whole[i])
        out = jax.jit(jax.shard_map(per_device(impl), mesh=mesh, in_specs=P("a", "b"),
                                    out_specs=P(("a", "b"))))(x)
        return [blocks(o) for o in out]

    checked = 0
    for name, got, want in zip(("rows", "columns", "both", "reduce_scatter", "all_gather"),
                               run(Jaccl, devices), run(Lax, reference)):
        for position, value in got.items():
            np.testing.assert_array_equal(value, want[position], err_msg=f"2-D mesh {name} @{position}")
            checked += 1
    return checked


def check_float_edges(devices, reference):
    """jax.lax's bits at the edges of float reductions (docs/semantics.md, "At the edges"): max
    and min pass over a NaN member (-inf / +inf where every member has one), -0s sum to +0,
    float16 sums round after every addition in rank order; over the n devices and over a group
    of one (an n x 1 mesh's second axis), float32 and float16, against jax.lax on `reference`.
    In one process only: across processes jax.lax's reference runs on gloo, whose sums of -0s
    are -0 and whose max keeps a NaN of some members (docs/semantics.md)."""
    import jax

    if jax.process_count() > 1:
        return 0
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    from suite import Jaccl, Lax
    from util import blocks

    n = len(devices)
    ops = [(op, axis) for op in ("sum", "max", "min") for axis in ("x", "y")]

    def run(impl, devs, whole):
        mesh = Mesh(np.array(devs).reshape(n, 1), ("x", "y"))
        x = jax.make_array_from_callback(whole.shape, NamedSharding(mesh, P("x", "y")),
                                         lambda i: whole[i])
        fn = lambda v: tuple(impl.reduce(v, op, axis) for op, axis in ops)  # noqa: E731
        out = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("x", "y"),
                                    out_specs=P("x", "y")))(x)
        return [blocks(o) for o in out]

    checked = 0
    for dtype in (np.float32, np.float16):
        whole = np.random.default_rng(5).normal(size=(n, 4096)).astype(dtype)
        whole[:, 0] = np.nan        # on every member
        whole[0, 1] = np.nan        # on the first
        whole[n - 1, 2] = np.nan    # on the last
        whole[:, 3] = -0.0
        for (op, axis), got, want in zip(ops, run(Jaccl, devices, whole), run(Lax, reference, whole)):
            for position, value in got.items():
                np.testing.assert_array_equal(
                    value.view(np.uint8), want[position].view(np.uint8),
                    err_msg=f"{op} over {axis} {np.dtype(dtype).name} @{position}")
                checked += 1
    return checked


def expect_path(path: str) -> None:
    from jax_jaccl._ext import cuda_engine

    peer, staged = cuda_engine.path_counts()
    print(f"PATHS peer={peer} staged={staged}", flush=True)
    if path == "peer":
        assert peer > 0 and staged == 0, f"expected the peer path: peer={peer} staged={staged}"
    elif path == "staged":
        assert staged > 0 and peer == 0, f"expected the staged path: peer={peer} staged={staged}"
