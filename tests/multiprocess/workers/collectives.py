"""Runs the collective battery of tests/unit/suite.py across processes: every collective
against jax.lax in the same job, several dtypes and shapes, each algorithm forced, a 2-D mesh.
Prints `OK name` per check, `DIGEST name device hash` for results that must be bitwise equal on
every device, and `DONE` at the end."""

from __future__ import annotations

import hashlib
import os
import sys

from common import start

args, index, count = start(__doc__)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import jax_jaccl as jaccl  # noqa: E402
from suite import Jaccl, Lax, every_collective  # noqa: E402
from util import exact_data  # noqa: E402

devices = jax.devices()
n = len(devices)
hosts = int(os.environ.get("JACCL_TEST_FAKE_HOSTS", "0"))  # hosts the launcher emulates
hierarchical = hosts > 1 and n // hosts > 1
print(f"WORLD {jaccl.init().host_count} hosts", flush=True)
print(f"TRANSPORT {jaccl.init().transport}", flush=True)
mesh = jax.make_mesh((n,), ("x",))


def global_array(local_rows, spec=P("x"), m=mesh):
    full = np.concatenate(local_rows)
    return jax.make_array_from_callback(full.shape, NamedSharding(m, spec), lambda i: full[i])


def per_device(fn, m=mesh, in_spec=P("x"), axes=("x",)):
    body = lambda *a: jax.tree.map(lambda r: r[None], fn(*a))  # noqa: E731
    return jax.jit(jax.shard_map(body, mesh=m, in_specs=in_spec, out_specs=P(axes)))


def shards(a):
    return {s.device.id: np.asarray(s.data) for s in a.addressable_shards}


def compare(name, got, want, digest=False):
    g, w = shards(got), shards(want)
    for dev in g:
        a, b = g[dev], w[dev]
        assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape, a.dtype, b.dtype)
        if a.dtype == jnp.bfloat16:
            a, b = a.astype(np.float32), b.astype(np.float32)
        np.testing.assert_array_equal(a, b, err_msg=f"{name} on device {dev}")
        if digest:
            print(f"DIGEST {name} {dev} {hashlib.sha1(g[dev].tobytes()).hexdigest()}", flush=True)
    print(f"OK {name}", flush=True)


dtypes = [np.float32, jnp.bfloat16, np.float16, np.int8, np.uint32, np.bool_]
shapes = [(7,), (1024,), (256, 256), (0,)]
for dtype in dtypes:
    for shape in shapes:
        rows = [exact_data(shape, dtype, seed=d) for d in range(n)]
        x = global_array(rows)
        got = per_device(lambda v: every_collective(Jaccl, v, dtype, n))(x)
        want = (per_device(lambda v: every_collective(Lax, v, dtype, n))(x) if shape[0]
                else jax.tree.map(jnp.zeros_like, got))
        for key in got:
            compare(f"{np.dtype(dtype).name}/{shape}/{key}", got[key], want[key],
                    digest=key.startswith(("all_reduce", "all_gather")))

with jax.enable_x64(True):
    for dtype in (np.float64, np.int64):
        rows = [exact_data((33,), dtype, seed=d) for d in range(n)]
        x = global_array(rows)
        got = per_device(lambda v: every_collective(Jaccl, v, dtype, n))(x)
        want = per_device(lambda v: every_collective(Lax, v, dtype, n))(x)
        for key in got:
            compare(f"{np.dtype(dtype).name}/{key}", got[key], want[key])

# Each algorithm forced, sizes that span many frames and odd ones.
for size in (5, 300_007):
    rows = [exact_data((size * n,), np.int32, seed=d) for d in range(n)]
    x = global_array(rows)
    algorithms = ["naive", "mesh", "ring", "ring_oneway"] + (["hierarchical"] if hierarchical else [])
    for algorithm in algorithms:
        ours = per_device(lambda v: jaccl.all_reduce(v, "x", algorithm=algorithm))(x)
        theirs = per_device(lambda v: jax.lax.psum(v, "x"))(x)
        compare(f"all_reduce/{algorithm}/{size}", ours, theirs, digest=True)
        if algorithm == "naive":
            continue
        if algorithm == "hierarchical":
            ours = per_device(lambda v: jaccl.reduce_scatter(v, "x", tiled=True, algorithm=algorithm))(x)
            theirs = per_device(lambda v: jax.lax.psum_scatter(v, "x", tiled=True))(x)
            compare(f"reduce_scatter/{algorithm}/{size}", ours, theirs)
            continue
        ours = per_device(lambda v: jaccl.reduce_scatter(v, "x", tiled=True, algorithm=algorithm))(x)
        theirs = per_device(lambda v: jax.lax.psum_scatter(v, "x", tiled=True))(x)
        compare(f"reduce_scatter/{algorithm}/{size}", ours, theirs)
        ours = per_device(lambda v: jaccl.all_gather(v, "x", tiled=True, algorithm=algorithm))(x)
        theirs = per_device(lambda v: jax.lax.all_gather(v, "x", tiled=True))(x)
        compare(f"all_gather/{algorithm}/{size}", ours, theirs, digest=True)

# A 2-D mesh: collectives over one axis run in each group independently.
if n % 2 == 0 and n >= 4:
    mesh2 = jax.make_mesh((n // 2, 2), ("a", "b"))
    data = np.random.default_rng(0).integers(-9, 9, size=(n // 2 * 4, 2 * 12)).astype(np.int32)
    x2 = jax.make_array_from_callback(data.shape, NamedSharding(mesh2, P("a", "b")),
                                      lambda i: data[i])
    for axes in ("a", "b", ("a", "b")):
        for name, ours, theirs in [
            ("all_reduce", lambda v: jaccl.all_reduce(v, axes), lambda v: jax.lax.psum(v, axes)),
            ("reduce_scatter", lambda v: jaccl.reduce_scatter(v, axes, scatter_dimension=1, tiled=True),
             lambda v: jax.lax.psum_scatter(v, axes, scatter_dimension=1, tiled=True)),
            ("all_gather", lambda v: jaccl.all_gather(v, axes, tiled=True),
             lambda v: jax.lax.all_gather(v, axes, tiled=True)),
        ]:
            run = lambda fn: jax.jit(jax.shard_map(fn, mesh=mesh2, in_specs=P("a", "b"),  # noqa: E731
                                                   out_specs=P("a", "b")))(x2)
            compare(f"mesh2d/{axes}/{name}", run(ours), run(theirs))

print("DONE", flush=True)
sys.stdout.flush()
