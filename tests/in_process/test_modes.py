"""Each collective eagerly, under jit, under vmap (inside and around shard_map) and under
grad, against the same program written with jax.lax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_jaccl as jaccl

from util import N, dtype_id, mesh1d, put

# name -> (jaccl version, jax.lax version, out spec); inputs are [8, 12] per device.
OPS = {
    "all_reduce": (lambda v: jaccl.all_reduce(v, "x"), lambda v: jax.lax.psum(v, "x"), P()),
    "all_reduce_max": (lambda v: jaccl.all_reduce(v, "x", op="max"), lambda v: jax.lax.pmax(v, "x"),
                       P()),
    "reduce_scatter": (lambda v: jaccl.reduce_scatter(v, "x", scatter_dimension=1, tiled=True),
                       lambda v: jax.lax.psum_scatter(v, "x", scatter_dimension=1, tiled=True),
                       P("x")),
    "reduce_scatter_untiled": (lambda v: jaccl.reduce_scatter(v[:N], "x"),
                               lambda v: jax.lax.psum_scatter(v[:N], "x"), P("x")),
    "all_gather": (lambda v: jaccl.all_gather(v, "x", axis=1, tiled=True),
                   lambda v: jax.lax.all_gather(v, "x", axis=1, tiled=True), P("x")),
    "all_gather_untiled": (lambda v: jaccl.all_gather(v, "x"), lambda v: jax.lax.all_gather(v, "x"),
                           P("x")),
    "all_to_all": (lambda v: jaccl.all_to_all(v, "x", 1, 0, tiled=True),
                   lambda v: jax.lax.all_to_all(v, "x", 1, 0, tiled=True), P("x")),
    # jax.lax's transpose of an untiled all_to_all with split != concat returns the wrong
    # shape, so the reference is the equivalent tiled call.
    "all_to_all_untiled": (lambda v: jaccl.all_to_all(v[:N], "x", 0, 1),
                           lambda v: jax.lax.all_to_all(v[:N], "x", 0, 1, tiled=True)
                           .reshape(N, -1).T, P("x")),
}
LINEAR = [name for name in OPS if name != "all_reduce_max"]


def program(fn, out_spec, jit=True):
    f = jax.shard_map(fn, mesh=mesh1d(), in_specs=P("x"), out_specs=out_spec)
    return jax.jit(f) if jit else f


def sample(dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return put((rng.integers(-8, 8, size=(N * 8, 12)) / 4).astype(dtype), mesh1d())


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("jit", [True, False], ids=["jit", "eager"])
def test_eager_and_jit(name, jit):
    ours, theirs, spec = OPS[name]
    x = sample()
    np.testing.assert_array_equal(program(ours, spec, jit)(x), program(theirs, spec, jit)(x))


@pytest.mark.parametrize("name", OPS)
def test_vmap_inside_shard_map(name):
    """vmap over axis 1 of the per-device [8, 3, 12] against a loop over that axis (jax.lax's
    own untiled psum_scatter batching rule misplaces the batch dimension)."""
    ours, theirs, spec = OPS[name]
    rng = np.random.default_rng(1)
    x = put((rng.integers(-8, 8, size=(N * 8, 3, 12)) / 4).astype(np.float32), mesh1d())
    mapped = lambda v: jax.vmap(ours, in_axes=1, out_axes=0)(v)  # noqa: E731
    looped = lambda v: jnp.stack([theirs(v[:, i]) for i in range(3)])  # noqa: E731
    out_spec = P(None, *spec) if spec != P() else P()
    np.testing.assert_array_equal(program(mapped, out_spec)(x), program(looped, out_spec)(x))


@pytest.mark.parametrize("name", ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"])
def test_vmap_around_shard_map(name):
    ours, theirs, spec = OPS[name]
    rng = np.random.default_rng(2)
    from jax.sharding import NamedSharding

    x = jax.device_put((rng.integers(-8, 8, size=(3, N * 8, 12)) / 4).astype(np.float32),
                       NamedSharding(mesh1d(), P(None, "x")))
    mapped = lambda fn: jax.jit(jax.vmap(program(fn, spec, jit=False)))  # noqa: E731
    np.testing.assert_array_equal(mapped(ours)(x), mapped(theirs)(x))


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("name", LINEAR)
def test_grad(name, dtype):
    ours, theirs, spec = OPS[name]
    x = sample(dtype, seed=3)
    weights = jnp.asarray(np.random.default_rng(4).normal(size=(64,)), dtype)

    def loss(fn):
        def f(x):
            y = program(lambda v: fn(jnp.sin(v)), spec, jit=False)(x)
            flat = y.reshape(-1).astype(jnp.float32)
            return jnp.sum(flat * jnp.resize(weights, flat.shape))
        return jax.jit(jax.grad(f))

    got, want = loss(ours)(x), loss(theirs)(x)
    tol = 1e-6 if dtype == np.float32 else 2e-2
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"])
def test_grad_without_check_vma(name):
    """With check_vma=False the transpose of a sum is the sum itself, as for jax.lax.psum."""
    ours, theirs, _ = OPS[name]
    x = sample(seed=5)

    def loss(fn):
        smap = jax.shard_map(lambda v: fn(v * v), mesh=mesh1d(), in_specs=P("x"), out_specs=P("x"),
                             check_vma=False)
        return jax.jit(jax.grad(lambda x: jnp.sum(jnp.sin(smap(x)))))

    np.testing.assert_allclose(loss(ours)(x), loss(theirs)(x), rtol=1e-6)


def test_max_is_not_differentiable():
    x = sample()
    f = jax.grad(lambda x: jnp.sum(program(lambda v: jaccl.all_reduce(v, "x", op="max"), P(),
                                           jit=False)(x)))
    with pytest.raises(NotImplementedError, match="op='sum'"):
        f(x)


def test_jvp():
    x = sample(seed=6)
    ours = program(lambda v: jaccl.reduce_scatter(v, "x", tiled=True), P("x"), jit=False)
    theirs = program(lambda v: jax.lax.psum_scatter(v, "x", tiled=True), P("x"), jit=False)
    t = sample(seed=7)
    (y1, dy1), (y2, dy2) = jax.jvp(ours, (x,), (t,)), jax.jvp(theirs, (x,), (t,))
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(dy1, dy2)
