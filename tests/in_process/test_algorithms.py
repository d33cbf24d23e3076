"""Each algorithm forced, on odd sizes and sizes that span many frames, against numpy; results
bitwise equal on every device and from run to run; groups of a 2-D mesh."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_jaccl as jaccl

from util import N, assert_same_on_every_device, mesh1d, mesh2d, put, stacked

# 300_007 float32 elements span several 512 KiB frames per block.
SIZES = [1, 3, 1023, 4099, 300_007]


def data(size, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-50, 50, size=(N, size)).astype(np.int32)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("algorithm", ["naive", "mesh", "ring", "ring_oneway"])
def test_all_reduce_algorithms(algorithm, size):
    local = data(size)
    x = put(local.reshape(-1), mesh1d())
    f = stacked(lambda v: jaccl.all_reduce(v, "x", algorithm=algorithm), mesh1d())
    first, second = np.asarray(f(x)), np.asarray(f(x))
    np.testing.assert_array_equal(first[0], local.sum(0))
    assert_same_on_every_device(first)
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("size", SIZES[1:])
@pytest.mark.parametrize("algorithm", ["mesh", "ring", "ring_oneway"])
def test_reduce_scatter_and_all_gather_algorithms(algorithm, size):
    local = data(size * N, seed=1)
    x = put(local.reshape(-1), mesh1d())
    rs = stacked(lambda v: jaccl.reduce_scatter(v, "x", tiled=True, algorithm=algorithm), mesh1d())
    np.testing.assert_array_equal(np.asarray(rs(x)), local.sum(0).reshape(N, size))
    ag = stacked(lambda v: jaccl.all_gather(v, "x", tiled=True, algorithm=algorithm), mesh1d())
    got = np.asarray(ag(x))
    assert_same_on_every_device(got)
    np.testing.assert_array_equal(got[0], local.reshape(-1))


@pytest.mark.parametrize("algorithm", ["mesh", "ring"])
def test_strided_blocks(algorithm):
    """Scatter and gather along a non-leading dimension read and write strided blocks."""
    rng = np.random.default_rng(2)
    local = rng.integers(-9, 9, size=(N, 6, 4 * 5, 3)).astype(np.int32)
    x = put(local.reshape(N * 6, 20, 3), mesh1d())
    rs = stacked(lambda v: jaccl.reduce_scatter(v, "x", scatter_dimension=1, tiled=True,
                                                algorithm=algorithm), mesh1d())
    want = local.sum(0).reshape(6, N, 5, 3).transpose(1, 0, 2, 3)
    np.testing.assert_array_equal(np.asarray(rs(x)), want)
    ag = stacked(lambda v: jaccl.all_gather(v, "x", axis=1, tiled=True, algorithm=algorithm),
                 mesh1d())
    np.testing.assert_array_equal(np.asarray(ag(x))[0], np.concatenate(list(local), axis=1))


@pytest.mark.parametrize("axes", ["a", "b", ("a", "b"), ("b", "a")], ids=str)
def test_groups_of_a_2d_mesh(axes):
    """A collective over some axes of a 2-D mesh runs independently in each group."""
    mesh = mesh2d()
    rng = np.random.default_rng(3)
    x = put(rng.integers(-9, 9, size=(2 * 8, 2 * 12)).astype(np.int32), mesh, P("a", "b"))

    def run(fn, out_spec=P("a", "b")):
        return np.asarray(jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("a", "b"),
                                                out_specs=out_spec))(x))

    pairs = {
        "all_reduce": (lambda v: jaccl.all_reduce(v, axes), lambda v: jax.lax.psum(v, axes)),
        "reduce_scatter": (lambda v: jaccl.reduce_scatter(v, axes, tiled=True),
                           lambda v: jax.lax.psum_scatter(v, axes, tiled=True)),
        "all_gather": (lambda v: jaccl.all_gather(v, axes, axis=1, tiled=True),
                       lambda v: jax.lax.all_gather(v, axes, axis=1, tiled=True)),
        "all_to_all": (lambda v: jaccl.all_to_all(v, axes, 1, 0, tiled=True),
                       lambda v: jax.lax.all_to_all(v, axes, 1, 0, tiled=True)),
    }
    for name, (ours, theirs) in pairs.items():
        np.testing.assert_array_equal(run(ours), run(theirs), err_msg=name)


def test_in_place_all_reduce_with_donation():
    """With the input donated the result reuses its buffer; kept inputs stay intact."""
    mesh = mesh1d()
    local = data(70_001, seed=4).astype(np.float32)
    f = jax.jit(jax.shard_map(lambda v: jaccl.all_reduce(v, "x"), mesh=mesh, in_specs=P("x"),
                              out_specs=P("x")), donate_argnums=0)
    x = put(local.reshape(-1), mesh)
    y = f(x)
    assert x.is_deleted()
    np.testing.assert_array_equal(np.asarray(y).reshape(N, -1)[2], local.sum(0))
    keep = put(local.reshape(-1), mesh)
    g = jax.jit(jax.shard_map(lambda v: (jaccl.all_reduce(v, "x"), v * 2), mesh=mesh,
                              in_specs=P("x"), out_specs=(P("x"), P("x"))))
    total, doubled = g(keep)
    np.testing.assert_array_equal(np.asarray(doubled), local.reshape(-1) * 2)
    np.testing.assert_array_equal(np.asarray(keep), local.reshape(-1))
    np.testing.assert_array_equal(np.asarray(total).reshape(N, -1)[0], local.sum(0))


def test_many_collectives_in_one_program_keep_their_order():
    """Independent collectives on large buffers: XLA may run them concurrently; the ordering
    token keeps every device on the same sequence."""
    mesh = mesh1d()
    rng = np.random.default_rng(5)
    arrays = [rng.normal(size=(N * 256, 64)).astype(np.float32) for _ in range(6)]
    xs = [put(a, mesh) for a in arrays]

    def body(*vs):
        return tuple(jaccl.all_reduce(v * (i + 1), "x") for i, v in enumerate(vs))

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"),) * 6, out_specs=(P(),) * 6))
    for i, (got, a) in enumerate(zip(f(*xs), arrays)):
        np.testing.assert_allclose(np.asarray(got), (a.reshape(N, 256, 64) * (i + 1)).sum(0),
                                   rtol=1e-5, atol=1e-4)


def test_inside_scan():
    mesh = mesh1d()
    x = put(np.arange(N * 5, dtype=np.float32), mesh)

    def body(v):
        def step(c, _):
            c = c + jaccl.all_reduce(c, "x") / N
            return c, jaccl.all_reduce(jnp.sum(c), "x")
        return jax.lax.scan(step, v, None, length=3)

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P())))
    final, sums = f(x)
    c = np.arange(N * 5, dtype=np.float32).reshape(N, 5)
    want = []
    for _ in range(3):
        c = c + c.sum(0) / N
        want.append(c.sum())
    np.testing.assert_allclose(np.asarray(final), c.reshape(-1), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(sums), want, rtol=1e-6)


@pytest.mark.parametrize("op, algorithm, needs", [
    ("all_reduce", "cascade", "needs every group to be several processes each holding the same number"),
    ("all_reduce", "hierarchical", "needs every group to span several hosts with the same number"),
    ("reduce_scatter", "hierarchical", "needs every group to span several hosts with the same number"),
])
def test_an_algorithm_asked_for_where_its_layout_is_not_is_refused_at_trace_time(op, algorithm, needs):
    """The cascade needs processes each holding a run of ranks (several of each), hierarchical
    several hosts with as many ranks (> 1) on each: over the devices of one process, asked for
    by name, a ValueError as the program is traced, naming what it needs (the engine, which
    checks too, would stop the process's communication)."""
    x = put(data(1 << 16).reshape(-1), mesh1d())
    tiled = {"tiled": True} if op == "reduce_scatter" else {}
    f = stacked(lambda v: getattr(jaccl, op)(v, "x", algorithm=algorithm, **tiled), mesh1d())
    with pytest.raises(ValueError, match=f"jaccl.{op}: algorithm='{algorithm}' {needs}"):
        f(x)
    np.testing.assert_array_equal(  # the process goes on communicating
        np.asarray(stacked(lambda v: jaccl.all_reduce(v, "x"), mesh1d())(x))[0],
        data(1 << 16).sum(0))


@pytest.mark.parametrize("processes, run", [
    ([0, 0, 1, 1], 2), ([3, 3, 3, 1, 1, 1], 3), ([0, 0, 1, 1, 2, 2], 2),
    ([0, 1, 0, 1], 0),          # runs of one
    ([0, 0, 0, 0], 0),          # one process
    ([0, 0, 1, 1, 0, 0], 0),    # a process holds two runs
    ([0, 0, 1, 1, 1], 0),       # runs of different lengths
    ([0, 0, 1], 0), ([], 0),
])
def test_the_cascade_layout_as_the_engine_decides_it(processes, run):
    """One owner of the layout rule (xla_ffi/comm/layouts.h): the engine's Member::process_run
    and the trace-time refusal above both ask it."""
    from jax_jaccl import _ext
    assert _ext.engine.process_run(processes) == run


@pytest.mark.parametrize("hosts, fits", [
    ([0, 0, 1, 1], True), ([5, 2, 5, 2, 7, 7], True), ([1, 1, 1, 0, 0, 0], True),
    ([0, 1], False),            # one rank on each host
    ([0, 0, 0, 0], False),      # one host
    ([0, 0, 1, 1, 1], False),   # as many ranks on each host, no
    ([], False),
])
def test_the_hierarchical_layout_as_the_engine_decides_it(hosts, fits):
    from jax_jaccl import _ext
    assert _ext.engine.spans_hosts_evenly(hosts) is fits
