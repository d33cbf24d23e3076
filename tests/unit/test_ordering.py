"""Every device runs its collectives in one order: within a block by the lowering's token
chain, across nested blocks (loops, nested jit) by data dependencies or by JAX's ordered
effect in JACCL_STRICT_ORDER=1 mode."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

import jax_jaccl as jaccl

from util import N, mesh1d, put


def test_nested_jit_and_loop_with_data_dependencies():
    mesh = mesh1d()
    x = put(np.arange(N * 64 * 64, dtype=np.float32).reshape(N * 64, 64) / 1000, mesh)

    @jax.jit
    def inner(v):
        return jaccl.all_gather(v, "x", tiled=True)[: v.shape[0]] * 2

    def body(v):
        a = jaccl.all_reduce(v, "x")
        b = inner(v + a)
        c = jax.lax.fori_loop(0, 3, lambda i, c: c + jaccl.all_reduce(c, "x") / N, b)
        return jaccl.reduce_scatter(c, "x", tiled=True)

    def reference(v):
        a = jax.lax.psum(v, "x")
        b = jax.lax.all_gather(v + a, "x", tiled=True)[: v.shape[0]] * 2
        c = jax.lax.fori_loop(0, 3, lambda i, c: c + jax.lax.psum(c, "x") / N, b)
        return jax.lax.psum_scatter(c, "x", tiled=True)

    run = lambda f: jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(x)  # noqa: E731
    np.testing.assert_allclose(run(body), run(reference), rtol=1e-5)


def test_program_keeps_the_fast_dispatch_path():
    """No JAX effect escapes the program by default (ordered effects disable the C++ path)."""
    mesh = mesh1d()
    f = jax.jit(jax.shard_map(lambda v: jaccl.all_reduce(v, "x"), mesh=mesh, in_specs=P("x"),
                              out_specs=P()))
    jaxpr = jax.make_jaxpr(f)(put(np.ones(N * 4, np.float32), mesh))
    assert not jaxpr.effects


STRICT = textwrap.dedent("""
    import jax, numpy as np
    jax.config.update("jax_num_cpu_devices", 4)
    from jax.sharding import PartitionSpec as P, NamedSharding
    import jax_jaccl as jaccl
    mesh = jax.make_mesh((4,), ("x",))
    xs = [jax.device_put(np.full((4 * 512, 64), i + 1, np.float32), NamedSharding(mesh, P("x")))
          for i in range(3)]

    def body(a, b, c):
        # Independent collectives in three blocks: the loop body, the cond branch and the top.
        looped = jax.lax.fori_loop(0, 2, lambda i, v: v + (jaccl.all_reduce(v, "x") / 4 - v), a)
        branched = jax.lax.cond(True, lambda v: jaccl.all_gather(v, "x", tiled=True)[:512],
                                lambda v: v, b)
        return looped, branched, jaccl.reduce_scatter(c, "x", tiled=True)

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"),) * 3,
                              out_specs=(P("x"), P("x"), P("x"))))
    assert jax.make_jaxpr(f)(*xs).effects, "strict mode must carry an ordered effect"
    for _ in range(20):
        looped, branched, scattered = f(*xs)
        assert np.all(np.asarray(looped) == 1) and np.all(np.asarray(branched) == 2)
        assert np.all(np.asarray(scattered) == 12)
    print("ok")
""")


def test_strict_order_threads_one_token_through_control_flow():
    done = subprocess.run([sys.executable, "-c", STRICT], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, JACCL_STRICT_ORDER="1",
                                                JACCL_TIMEOUT="20"))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
