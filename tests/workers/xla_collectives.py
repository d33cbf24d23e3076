"""An unchanged JAX program (jax, jax.numpy and jax.lax only, no jaccl op), run by jaccl-run
with --xla-collectives jaccl or gloo: each collective XLA emits (from the partitioner or from
jax.lax in shard_map) is checked on every process against numpy.

Prints "XLA COLLECTIVES <mode> CHECKED <n> ON <processes>" when every case passed; with
`mode` jaccl it first asserts that jaccl's mpiabi library carries XLA's collectives in this process.
"""

import sys

import numpy as np

import jax_jaccl.distributed

jax_jaccl.distributed.initialize()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from jax_jaccl import _xla_collectives  # noqa: E402

MODE = sys.argv[1]
n, processes = jax.device_count(), jax.process_count()
assert processes > 1, "this program checks a job of several processes"
assert _xla_collectives.active() == (MODE == "jaccl"), (MODE, _xla_collectives.problem())
mesh = Mesh(np.array(jax.devices()), ("x",))
checked = 0


def put(value, spec):
    sharding = NamedSharding(mesh, spec)
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def check(name, out, expected, exact=True):
    global checked
    for shard in out.addressable_shards:
        got, want = np.asarray(shard.data), np.asarray(expected)[shard.index]
        if exact:  # bitwise: -0 is not +0, NaNs match only with their payloads
            want = want.astype(got.dtype)  # numpy's sums widen integers
            bits = np.dtype(f"u{got.dtype.itemsize}")
            np.testing.assert_array_equal(np.ascontiguousarray(got).view(bits),
                                          np.ascontiguousarray(want).view(bits), err_msg=name)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)
    checked += 1


rng = np.random.default_rng(3)
rows = 4 * n

# The partitioner's collectives: a sharded reduction and a matmul over the contracted axis
# (all-reduce), a reshard to replicated (all-gather) and across dimensions (all-to-all).
for dtype in (np.float32, np.int32, np.float64):
    v = rng.integers(-9, 9, (rows, 5)).astype(dtype)
    check(f"sum {dtype.__name__}", jax.jit(lambda a: jnp.sum(a, axis=0),
                                          out_shardings=NamedSharding(mesh, P()))(put(v, P("x"))),
          v.sum(axis=0))
a = rng.integers(-3, 3, (6, rows)).astype(np.float32)
b = rng.integers(-3, 3, (rows, 7)).astype(np.float32)
check("matmul", jax.jit(jnp.matmul, out_shardings=NamedSharding(mesh, P()))(
    put(a, P(None, "x")), put(b, P("x", None))), a @ b)
v = rng.normal(size=(rows, 3 * n)).astype(np.float32)
check("reshard to replicated", jax.jit(lambda t: t, out_shardings=NamedSharding(mesh, P()))(
    put(v, P("x"))), v)
check("reshard across dimensions", jax.jit(lambda t: t, out_shardings=NamedSharding(
    mesh, P(None, "x")))(put(v, P("x", None))), v)

# A data-parallel training step under jit with shardings: the gradient's all-reduce.
x = rng.normal(size=(rows, 3)).astype(np.float32)
y = rng.normal(size=(rows, 1)).astype(np.float32)
w = np.ones((3, 1), np.float32)
grad = jax.jit(jax.grad(lambda w, x, y: jnp.mean((x @ w - y) ** 2)),
               out_shardings=NamedSharding(mesh, P()))(put(w, P()), put(x, P("x")), put(y, P("x")))
check("grad", grad, 2 * x.T @ (x @ w - y) / rows, exact=False)


# jax.lax collectives in shard_map.
def spmd(f, value, out_spec=P("x")):
    return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=out_spec))(
        put(value, P("x")))


blocks = rng.integers(-50, 50, (rows * n, 3))
per = blocks.reshape(n, -1, 3)
for dtype in (np.float32, np.int32):
    v = blocks.astype(dtype)
    p = v.reshape(n, -1, 3)
    check(f"psum {dtype.__name__}", spmd(lambda t: lax.psum(t, "x"), v),
          np.tile(p.sum(0), (n, 1)))
    check(f"pmax {dtype.__name__}", spmd(lambda t: lax.pmax(t, "x"), v), np.tile(p.max(0), (n, 1)))
    check(f"pmin {dtype.__name__}", spmd(lambda t: lax.pmin(t, "x"), v), np.tile(p.min(0), (n, 1)))
v = blocks.astype(np.float32)
check("all_gather", spmd(lambda t: lax.all_gather(t, "x", tiled=True), v),
      np.tile(v, (n, 1)))
check("psum_scatter", spmd(lambda t: lax.psum_scatter(t, "x", tiled=True), v),
      per.sum(0))
# all_to_all: block j of rank i goes to rank j, as its block i.
parts = per.reshape(n, n, -1, 3).astype(np.float32)
check("all_to_all", spmd(lambda t: lax.all_to_all(t, "x", 0, 0, tiled=True), v),
      parts.transpose(1, 0, 2, 3).reshape(-1, 3))
shift = [(i, (i + 1) % n) for i in range(n)]
check("ppermute", spmd(lambda t: lax.ppermute(t, "x", shift), v),
      np.roll(per, 1, axis=0).reshape(-1, 3))
# Moved elements keep their bits: -0, NaNs with payloads, a signalling NaN, inf, a subnormal.
edges = np.resize(np.array([0x80000000, 0x7FC12345, 0xFFC00001, 0x7F800001, 0x7F800000, 0x00000001,
                            0x3F800000], np.uint32), blocks.size).view(np.float32).reshape(blocks.shape)
edge_parts = edges.reshape(n, n, -1, 3)
check("all_gather of -0 and NaNs", spmd(lambda t: lax.all_gather(t, "x", tiled=True), edges),
      np.tile(edges, (n, 1)))
check("all_to_all of -0 and NaNs", spmd(lambda t: lax.all_to_all(t, "x", 0, 0, tiled=True), edges),
      edge_parts.transpose(1, 0, 2, 3).reshape(-1, 3))
check("ppermute of -0 and NaNs", spmd(lambda t: lax.ppermute(t, "x", shift), edges),
      np.roll(edges.reshape(n, -1, 3), 1, axis=0).reshape(-1, 3))
check("reshard of -0 and NaNs", jax.jit(lambda t: t, out_shardings=NamedSharding(mesh, P()))(
    put(edges, P("x"))), edges)
c = (blocks + 1j * blocks[::-1]).astype(np.complex64)
check("psum complex64", spmd(lambda t: lax.psum(t, "x"), c),
      np.tile(c.reshape(n, -1, 3).sum(0), (n, 1)))
bf = blocks.astype(jnp.bfloat16)
check("psum bfloat16", spmd(lambda t: lax.psum(t, "x"), bf),
      np.tile(np.asarray(bf, np.float32).reshape(n, -1, 3).sum(0), (n, 1)).astype(jnp.bfloat16))

# Several devices per process, on a 2-D mesh (processes x local devices) in the order argv[2]
# names: "by_process", or "twisted", which pairs device i of one process with the other's
# device local - 1 - i (XLA names a group by its first device and a device by its rank, so the
# mpiabi library cannot tell which of a process's devices calls). Groups inside processes, across
# them, then all of them in turn, many times in one program, so that a process's devices run
# collectives of different groups at the same moment. One mesh per job: with two that order a
# process's devices differently, XLA's per-process caching of communicators defeats the mpiabi
# library (workers/xla_faults.py "meshes").
local = jax.local_device_count()
if local > 1:
    by_process = np.array(jax.devices()).reshape(processes, local)
    twisted = np.array([row if p % 2 == 0 else row[::-1] for p, row in enumerate(by_process)])
    order = sys.argv[2] if len(sys.argv) > 2 else "by_process"
    for name, grid in ((order, {"by_process": by_process, "twisted": twisted}[order]),):
        mesh2 = Mesh(grid, ("p", "l"))
        value = rng.integers(-50, 50, (processes * 4, local * 3)).astype(np.float32)
        blocks2 = value.reshape(processes, 4, local, 3)
        spec = P("p", "l")

        def spmd2(f, v=value):
            sharding = NamedSharding(mesh2, spec)
            arg = jax.make_array_from_callback(v.shape, sharding, lambda index: v[index])
            out = jax.jit(jax.shard_map(f, mesh=mesh2, in_specs=spec, out_specs=spec))(arg)
            return out

        def tile(summed, axis):  # the sum over a mesh axis, back at every member's place
            return np.broadcast_to(summed, blocks2.shape).reshape(value.shape)

        check(f"psum within processes, {name}", spmd2(lambda t: lax.psum(t, "l")),
              tile(blocks2.sum(2, keepdims=True), 2))
        check(f"psum across processes, {name}", spmd2(lambda t: lax.psum(t, "p")),
              tile(blocks2.sum(0, keepdims=True), 0))
        check(f"ppermute across processes, {name}",
              spmd2(lambda t: lax.ppermute(t, "p", [(i, (i + 1) % processes)
                                                    for i in range(processes)])),
              np.roll(blocks2, 1, axis=0).reshape(value.shape))

        turns = (("p", (0,), 0.5), (("p", "l"), (0, 2), 0.25), ("l", (2,), 1.0))

        def alternate(t):
            for _ in range(10):
                for axes, _, scale in turns:
                    t = lax.psum(t, axes) * scale - t
            return t

        expected = blocks2.astype(np.float64)
        for _ in range(10):
            for _, dims, scale in turns:
                expected = expected.sum(dims, keepdims=True) * scale - expected
        check(f"groups in turn, {name}", spmd2(alternate), expected.reshape(value.shape),
              exact=False)

print(f"XLA COLLECTIVES {MODE} CHECKED {checked} ON {processes} x {jax.local_device_count()}",
      flush=True)
