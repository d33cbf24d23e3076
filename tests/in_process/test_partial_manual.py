"""jaccl ops inside shard_maps that are manual over only some mesh axes (axis_names=..., nested
shard_maps, jax.vmap of a shard_map), under Shardy and GSPMD, one process x 4 devices: every
result equals jax.lax's. Such programs used to abort the process while XLA compiled them.

XLA:CPU itself aborts on some jax.lax collectives there (jax 0.10.2 and 0.12): all_gather under GSPMD
(a CHECK in hlo_sharding_util), and psum / pmax / psum_scatter of bfloat16 under either
("Invalid binary instruction opcode copy"). So every reference runs under Shardy, and the
bfloat16 one on float32 data (exact values: the same numbers); jaccl runs on both partitioners
and in bfloat16."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jax_jaccl as jaccl
from jax_jaccl import _settings

from suite import Jaccl, Lax, every_collective
from moe_cases import routing, tanh_expert_round_trips
from util import assert_equal, dtype_id, exact_data

PARTITIONERS = ["shardy", "gspmd"]


@contextlib.contextmanager
def partitioner(name):
    before = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", name == "shardy")
    try:
        yield
    finally:
        jax.config.update("jax_use_shardy_partitioner", before)


def auto_mesh(shape, names):
    """A mesh whose axes are all Auto (jax.make_mesh makes Explicit ones): the axes a shard_map
    leaves out are then XLA's to partition."""
    return jax.make_mesh(shape, names, axis_types=(jax.sharding.AxisType.Auto,) * len(shape))


def mesh_xy():
    return auto_mesh((2, 2), ("x", "y"))


def partly_manual(fn, mesh, in_specs, out_specs, manual):
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                 axis_names=set(manual)))


@pytest.mark.parametrize("spread", ["replicated", "split"])
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.int32, np.bool_], ids=dtype_id)
@pytest.mark.parametrize("name", PARTITIONERS)
def test_every_collective_over_the_manual_axis_matches_lax(name, dtype, spread):
    """Manual over "y", "x" left to XLA; the input either replicated over "x" or split over it
    (XLA then gathers it for the custom call)."""
    mesh = mesh_xy()
    data = exact_data((4, 8), dtype, seed=3)
    x = jax.device_put(data, NamedSharding(mesh, P("x" if spread == "split" else None, "y")))

    def program(impl):
        return partly_manual(lambda v: every_collective(impl, v, dtype, n=2, axis="y"), mesh,
                             P(None, "y"), P(None, "y"), {"y"})

    if dtype == jnp.bfloat16:
        want = jax.tree.map(lambda a: a.astype(dtype), program(Lax)(x.astype(np.float32)))
    else:
        want = program(Lax)(x)
    with partitioner(name):
        got = program(Jaccl)(x)
    assert got.keys() == want.keys()
    for key in got:
        assert_equal(got[key], want[key], err_msg=key)


@pytest.mark.parametrize("name", PARTITIONERS)
def test_collectives_in_nested_scanned_and_differentiated_partly_manual_code(name):
    mesh = auto_mesh((2, 2, 1), ("a", "b", "c"))  # "c" (size 1) is always left to XLA
    x = jnp.arange(32.0).reshape(4, 8)

    def nested(m):
        inner = jax.shard_map(lambda v: m.psum(v, "b"), in_specs=P("b"), out_specs=P("b"),
                              axis_names={"b"})
        return partly_manual(lambda v: inner(v) + m.psum(v * v, "a"), mesh, P("a"), P("a"),
                             {"a"})(x)

    def scanned(m):
        def body(v):
            step = lambda c, _: (m.psum(c, "b") * 0.5 + jax.lax.axis_index("b"), None)  # noqa: E731
            return jax.lax.scan(step, v, None, length=3)[0]
        return partly_manual(body, mesh, P("b"), P("b"), {"b"})(x)

    def gradient(m):
        f = jax.shard_map(lambda v: m.psum(v * v, ("a", "b")), mesh=mesh, in_specs=P(("a", "b")),
                          out_specs=P(("a", "b")), axis_names={"a", "b"})
        return jax.jit(jax.grad(lambda v: jnp.sum(f(v) * jnp.arange(8.0))))(x)

    def vmapped(m):
        f = jax.shard_map(lambda v: m.psum(v, "a"), mesh=mesh, in_specs=P("a"), out_specs=P("a"),
                          axis_names={"a"})
        return jax.jit(jax.vmap(f))(x.reshape(2, 4, 4))

    for program in (nested, scanned, gradient, vmapped):
        want = program(LaxNames)
        with partitioner(name):
            got = program(JacclNames)
        assert_equal(got, want, err_msg=program.__name__)


class LaxNames:
    psum = staticmethod(jax.lax.psum)


class JacclNames:
    psum = staticmethod(jaccl.all_reduce)


@pytest.mark.parametrize("name", PARTITIONERS)
def test_expert_parallel_layer_over_one_axis_of_a_data_expert_mesh(name):
    """dispatch, experts (tanh), combine and their gradient, manual over "x" (the expert axis)
    of a ("data", "x") mesh, against the dense reference."""
    mesh = auto_mesh((2, 2), ("data", "x"))
    T, H, K, E, C = 16, 8, 2, 4, 12  # per expert rank: 16 tokens, 2 experts of 12 rows
    rng = np.random.default_rng(5)
    x = (rng.integers(-64, 64, size=(2 * T, H)) / 16).astype(np.float32)
    idx = np.concatenate([routing("random", T, K, E, seed=r) for r in range(2)])
    w = rng.random(size=(2 * T, K)).astype(np.float32)
    scale = rng.normal(size=x.shape).astype(np.float32)
    ours, theirs = tanh_expert_round_trips(E, C)

    def loss(layer):
        def f(x, w, i, s):
            out = jax.shard_map(layer, mesh=mesh, in_specs=(P("x"),) * 3, out_specs=P("x"),
                                axis_names={"x"})(x, i, w)
            return jnp.sum(out * s), out
        return jax.jit(jax.value_and_grad(f, argnums=(0, 1), has_aux=True))

    args = [jax.device_put(a, NamedSharding(mesh, P("x"))) for a in (x, w, idx, scale)]
    (_, want), (rx, rw) = loss(theirs)(*args)
    with partitioner(name):
        (_, got), (dx, dw) = loss(ours)(*args)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)  # FMA
    np.testing.assert_allclose(np.asarray(dx), np.asarray(rx), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(dw), np.asarray(rw), rtol=1e-5, atol=1e-6)
    assert np.abs(np.asarray(dw)).sum() > 0


@pytest.fixture
def strict_order():
    with _settings.override(strict_order=True):  # JACCL_STRICT_ORDER=1
        yield


def test_strict_order_works_in_a_partly_manual_shard_map(strict_order):
    mesh = mesh_xy()
    x = jnp.arange(16.0).reshape(2, 8)
    got = partly_manual(lambda v: jaccl.all_reduce(v, "y") + jaccl.all_reduce(v * v, "y"), mesh,
                        P(None, "y"), P(None, "y"), {"y"})(x)
    want = partly_manual(lambda v: jax.lax.psum(v, "y") + jax.lax.psum(v * v, "y"), mesh,
                         P(None, "y"), P(None, "y"), {"y"})(x)
    assert_equal(got, want)


def test_strict_order_through_a_partly_manual_shard_map_is_refused_with_a_reason(strict_order):
    """A fully manual shard_map nested in a partly manual one: JAX would thread the strict
    mode's token through the outer one, which XLA cannot compile. A Python error says so."""
    mesh = auto_mesh((2, 2, 1), ("a", "b", "c"))
    inner = jax.shard_map(lambda v: jaccl.all_reduce(v, "b"), in_specs=P(("b", "c")),
                          out_specs=P(("b", "c")), axis_names={"b", "c"})
    f = partly_manual(inner, mesh, P("a"), P("a"), {"a"})
    with pytest.raises(ValueError, match="JACCL_STRICT_ORDER=1 .* manual over only some mesh axes"):
        f.lower(jnp.zeros((4, 4)))
