"""Every collective against its jax.lax counterpart, one process x 4 devices: all dtypes and
shapes (exact data, so results must be equal, not close), bitwise equal on every device.

The jaccl and jax.lax versions run as separate programs: XLA orders its own collectives but
not against custom calls, so independent jaccl and XLA collectives in one program could run
in different orders on different devices (see README, "Known limitations")."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jax_jaccl as jaccl  # noqa: F401

from suite import Jaccl, Lax, every_collective, psum_then_block
from util import (DTYPES, N, WIDE, assert_equal, assert_same_on_every_device, dtype_id, exact_data,
                  mesh1d, put, stacked)

SHAPES = [(7,), (10,), (1024,), (1024, 1024), (0,)]
# The large shape runs for the 4-byte types (time); the others move it in the process battery.
CASES = [(dtype, shape) for dtype in DTYPES for shape in SHAPES
         if shape != (1024, 1024) or np.dtype(dtype).itemsize == 4]


def x64_for(dtype):
    return jax.enable_x64(True) if dtype in WIDE else contextlib.nullcontext()


@pytest.mark.parametrize("dtype, shape", CASES,
                         ids=[f"{dtype_id(d)}-{'x'.join(map(str, s))}" for d, s in CASES])
def test_every_collective_matches_lax(dtype, shape):
    mesh = mesh1d()
    with x64_for(dtype):
        local = [exact_data(shape, dtype, seed=i) for i in range(N)]
        x = put(np.concatenate(local), mesh)
        got = stacked(lambda v: every_collective(Jaccl, v, dtype), mesh)(x)
        reference = stacked(lambda v: every_collective(Lax, v, dtype), mesh)
        if shape[0] == 0:  # XLA rejects most collectives on empty arrays: the shapes jax.lax's
            want = {k: np.zeros(s.shape, s.dtype)  # program would give (no values to compare)
                    for k, s in jax.eval_shape(reference, x).items()}
        else:
            want = reference(x)
        assert got.keys() == want.keys()
        for name in got:
            assert_equal(got[name], want[name], err_msg=name)
            if name.startswith(("all_reduce", "all_gather")):
                assert_same_on_every_device(got[name])


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.float16], ids=dtype_id)
def test_sums_add_in_rank_order_as_xla(dtype):
    """Random values: the mesh and naive all_reduce equal XLA:CPU's sum in ascending rank order
    (float32 and bfloat16 accumulated in float32 and rounded once, float16 rounded after every
    addition), and jax.lax.psum's bits; the ring is within one rounding of it."""
    mesh = mesh1d()
    rng = np.random.default_rng(1)
    local = rng.normal(size=(N, 100_003)).astype(dtype)
    wide = np.float16 if dtype == np.float16 else np.float32
    acc = local[0].astype(wide)
    for i in range(1, N):
        acc = acc + local[i].astype(wide)
    expected = acc.astype(dtype)
    x = put(local.reshape(-1), mesh)
    assert_equal(np.asarray(stacked(lambda v: jax.lax.psum(v, "x"), mesh)(x))[0], expected)
    for algorithm in ("naive", "mesh", "ring"):
        got = np.asarray(stacked(lambda v: jaccl.all_reduce(v, "x", algorithm=algorithm), mesh)(x))
        assert_same_on_every_device(got)
        if algorithm == "ring":
            # float16's roundings after every addition, in another order: a few of its ulps
            # at the partial sums' magnitude (up to about 10 here).
            np.testing.assert_allclose(got[0].astype(np.float32), expected.astype(np.float32),
                                       rtol=2 ** -7 if dtype != np.float32 else 1e-6,
                                       atol=0.05 if dtype == np.float16 else 1e-6)
        else:
            assert_equal(got[0], expected, err_msg=algorithm)


# A reduction between computations, as a training step writes one: each program once with
# jax.lax's names and once with jaccl's.
COMPUTED = {
    "psum": lambda L: lambda v: L.psum(v * 1.1, "x") * 3,
    "pmean": lambda L: lambda v: L.pmean(v * v, "x") - v,
    "pmax": lambda L: lambda v: L.pmax(v * 1.3, "x") * 3,
    "pmin": lambda L: lambda v: L.pmin(v * 1.3, "x") + v,
    "psum_scatter": lambda L: lambda v: L.psum_scatter(v.reshape(N, -1) * 1.1, "x",
                                                       scatter_dimension=0, tiled=True) * 3,
    "grad-psum": lambda L: lambda v: jax.grad(lambda w: (L.psum(w * w, "x") ** 2).sum())(v),
}


@pytest.mark.parametrize("program", COMPUTED)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16, jnp.float8_e4m3fn, jnp.float8_e3m4],
                         ids=dtype_id)
def test_reductions_between_computations_match_lax(program, dtype):
    """XLA:CPU runs its bfloat16 all-reduce and reduce-scatter in float32 (its float
    normalization promotes them) and, with excess precision (its default), on the value computed
    before the reduction unrounded, and hands the float32 result to what follows: jaccl's
    reductions do the same, so a psum between two computations has jax.lax's bits (until
    2026-12-07 jaccl's summed the operand rounded to bfloat16: psum(v * 1.1) * 3 differed in
    about 1 element in 6). float16's are not promoted, and round at the reduction in both. The
    float8 types XLA:CPU reduces in float16 after rounding the operand to float8, which jaccl's
    widening let XLA skip until then."""
    import jax_jaccl.lax as jl
    mesh = mesh1d()
    x = put(np.random.default_rng(2).normal(size=N * 4096).astype(np.float32) * 3, mesh)
    x = x.astype(dtype)
    got = np.asarray(stacked(COMPUTED[program](jl), mesh)(x))
    want = np.asarray(stacked(COMPUTED[program](jax.lax), mesh)(x))
    assert_equal(got, want, err_msg=program)


@pytest.mark.parametrize("tiled, dim, axes", [(False, 0, "x"), (True, 0, "x"), (True, 1, "x"),
                                              (False, 1, "x"), (True, 1, ("a", "b")), (True, 0, "b")])
def test_the_cross_process_reference_reduce_scatter_is_lax_psum_scatter(tiled, dim, axes):
    """suite.psum_then_block (the multi-process suites' reference, standing in for XLA:CPU's
    reduce-scatter across processes) equals jax.lax.psum_scatter in one process, bitwise."""
    mesh = jax.make_mesh((2, 2), ("a", "b")) if axes != "x" else mesh1d()
    spec = P(("a", "b")) if axes != "x" else P("x")
    local = np.random.default_rng(7).integers(-9, 9, size=(N * 4, 4)).astype(np.float32)  # 4 = N
    x = jax.device_put(local, NamedSharding(mesh, spec))
    kwargs = dict(scatter_dimension=dim, tiled=tiled)
    ours = stacked(lambda v: psum_then_block(v, axes, **kwargs), mesh, in_spec=spec, axes=spec[0])(x)
    theirs = stacked(lambda v: jax.lax.psum_scatter(v, axes, **kwargs), mesh, in_spec=spec, axes=spec[0])(x)
    assert ours.shape == theirs.shape
    assert_equal(np.asarray(ours), np.asarray(theirs))
