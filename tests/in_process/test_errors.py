"""Bad arguments fail at trace time with a message saying what to change."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_jaccl as jaccl

from util import N, mesh1d, put


def trace(fn, shape=(N * 6, 5), dtype=np.float32):
    x = put(np.zeros(shape, dtype), mesh1d())
    return jax.jit(jax.shard_map(fn, mesh=mesh1d(), in_specs=P("x"), out_specs=P("x"),
                                 check_vma=False)).lower(x)


@pytest.mark.parametrize("fn, error, match", [
    (lambda v: jaccl.reduce_scatter(v, "x", tiled=True), ValueError, "does not divide.*pad it"),
    (lambda v: jaccl.reduce_scatter(v, "x"), ValueError, "must equal the group size 4"),
    (lambda v: jaccl.reduce_scatter(v, "x", scatter_dimension=2), ValueError, "out of range"),
    (lambda v: jaccl.all_reduce(v, "x", op="mean"), ValueError, "unknown op 'mean'"),
    (lambda v: jaccl.all_reduce(v, "x", algorithm="tree"), ValueError, "unknown algorithm 'tree'"),
    (lambda v: jaccl.all_gather(v, "x", algorithm="naive"), ValueError, "unknown algorithm"),
    (lambda v: jaccl.all_reduce(v, "y"), ValueError, "axis 'y' is not a mesh axis.*bound axes: 'x'"),
    (lambda v: jaccl.all_reduce(v, ()), ValueError, "at least one mesh axis"),
    (lambda v: jaccl.all_reduce(v, ("x", "x")), ValueError, "repeats"),
    (lambda v: jaccl.all_to_all(v, "x", 1, 0, tiled=True), ValueError, "does not divide"),
    (lambda v: jaccl.all_to_all(v, "x", 0, 1), ValueError, "must equal the group size"),
    (lambda v: jaccl.all_gather(v, "x", axis=3), ValueError, "out of range"),
    (lambda v: jaccl.all_reduce(v.astype(jnp.complex64), "x", op="max"), TypeError,
     "op='max' on complex64 is not defined"),
    (lambda v: jaccl.all_gather(v.astype(jnp.float6_e2m3fn), "x"), TypeError,
     "float6_e2m3fn is not supported"),
    (lambda v: jaccl.ppermute(v, "x", [(0, 4)]), ValueError, "pair \\(0, 4\\) of perm is out of range"),
    (lambda v: jaccl.all_reduce(v > 0, "x"), TypeError, "op='sum' on bool.*op='max'"),
    (lambda v: jaccl.reduce_scatter(v[:N] > 0, "x", op="prod"), TypeError, "bool"),
])
def test_trace_time_errors(fn, error, match):
    with pytest.raises(error, match=match):
        trace(fn)


def test_outside_shard_map():
    with pytest.raises(ValueError, match="not a mesh axis of the enclosing jax.shard_map"):
        jax.jit(lambda v: jaccl.all_reduce(v, "x"))(jnp.ones(3))


def test_over_a_vmap_axis_is_jax_lax_on_the_batch():
    """Once refused; now what jax.lax computes (tests/in_process/test_lax_names.py checks every
    op). Mixing vmap and mesh axes where jax.lax cannot is refused with a reason."""
    x = put(np.arange(N * 2 * 3, dtype=np.float32).reshape(N * 2, 3), mesh1d())

    def program(reduce):
        body = lambda v: jax.vmap(lambda u: reduce(u, "i"), axis_name="i")(v)  # noqa: E731
        return jax.jit(jax.shard_map(body, mesh=mesh1d(), in_specs=P("x"), out_specs=P("x"),
                                     check_vma=False))

    np.testing.assert_array_equal(program(jaccl.all_reduce)(x), program(jax.lax.psum)(x))
    body = lambda v: jax.vmap(lambda u: jaccl.all_gather(u, ("i", "x")), axis_name="i")(v)  # noqa
    with pytest.raises(NotImplementedError, match="mixes jax.vmap axes"):
        jax.jit(jax.shard_map(body, mesh=mesh1d(), in_specs=P("x"), out_specs=P("x"),
                              check_vma=False)).lower(x)


def test_errors_do_not_poison_later_calls():
    with pytest.raises(ValueError):
        trace(lambda v: jaccl.all_reduce(v, "x", op="mean"))
    x = put(np.ones(N * 3, np.float32), mesh1d())
    f = jax.jit(jax.shard_map(lambda v: jaccl.all_reduce(v, "x"), mesh=mesh1d(), in_specs=P("x"),
                              out_specs=P()))
    np.testing.assert_array_equal(f(x), np.full(3, N, np.float32))
