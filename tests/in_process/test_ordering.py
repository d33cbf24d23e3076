"""Every device runs its collectives in one order: within a block by the lowering's token
chain, across nested blocks (loops, nested jit) by data dependencies or by JAX's ordered
effect in JACCL_STRICT_ORDER=1 mode."""

from __future__ import annotations


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
