"""The edges where jaccl's reductions could differ from jax.lax's, each decided on purpose and
pinned here (one process x 4 devices; docs/semantics.md, "At the edges", says the same):

- the same bits as jax.lax (XLA:CPU): a sum of -0s is +0; of equal values (-0 and +0) pmax and
  pmin keep the lower rank's (the ring algorithms, asked for by name, their ring order's);
  inf - inf, NaN in a sum, complex NaN, integer wrap-around (also
  inside pmean), float overflow to inf, subnormals (XLA:CPU flushes them, and jaccl's
  reductions run under the same flags);
- jaccl's answer, where it is the better one: pmax/pmin propagate a NaN (IEEE 754's maximum,
  numpy's np.max; XLA:CPU's collective returns the others' max), and float16 sums accumulate in
  float32 and round once (XLA:CPU rounds after every addition: one ulp apart, and 60000 +
  60000 - 60000 is inf there); bfloat16, which XLA:CPU accumulates in float32 too, agrees."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

import jax_jaccl as jaccl
from jax_jaccl import lax as jlax

from util import N, assert_equal


def mesh():
    return Mesh(np.array(jax.devices()[:N]), ("x",))


def run(L, fn, rows, algorithm=None):
    """fn(L, v) on every device; rows[i] is device i's input; the results stacked."""
    x = np.stack(rows)
    body = (lambda v: fn(L, v[0])[None]) if algorithm is None else \
        (lambda v: jaccl.all_reduce(v[0], "x", op=fn, algorithm=algorithm)[None])
    return np.asarray(jax.jit(jax.shard_map(body, mesh=mesh(), in_specs=P("x"),
                                            out_specs=P("x")))(x))


def bits(a):
    a = np.asarray(a)
    return a.view(np.uint8) if a.dtype != jnp.bfloat16 else a.view(np.uint16)


ALGORITHMS = ["naive", "mesh", "ring", "ring_oneway"]
f32 = np.float32


SAME_AS_LAX = {
    "sum of -0s": ("psum", [np.full(3, -0.0, f32)] * N),
    "sum of -0 and +0": ("psum", [np.array([-0.0, 0.0, -0.0], f32), np.zeros(3, f32)] * 2),
    "max of -0, +0": ("pmax", [np.full(3, -0.0, f32), np.zeros(3, f32)] * 2),
    "max of +0, -0": ("pmax", [np.zeros(3, f32), np.full(3, -0.0, f32)] * 2),
    "min of -0, +0": ("pmin", [np.full(3, -0.0, f32), np.zeros(3, f32)] * 2),
    "min of +0, -0": ("pmin", [np.zeros(3, f32), np.full(3, -0.0, f32)] * 2),
    "inf - inf": ("psum", [np.full(3, np.inf, f32), np.full(3, -np.inf, f32)] + [np.ones(3, f32)] * 2),
    "NaN in a sum": ("psum", [np.ones(3, f32), np.array([np.nan, 1, 2], f32)] + [np.ones(3, f32)] * 2),
    "overflow to inf": ("psum", [np.full(3, 3e38, f32)] * N),
    "subnormals summed": ("psum", [np.full(3, 1e-45, f32)] * N),
    "subnormals compared": ("pmax", [np.full(3, k * 1e-45, f32) for k in range(N)]),
    "int32 wraps": ("psum", [np.full(3, 2**30, np.int32)] * N),
    "int8 wraps": ("psum", [np.full(3, 100, np.int8)] * N),
    "pmean of wrapped int32": ("pmean", [np.full(3, 2**30, np.int32)] * N),
    "pmean of uint8": ("pmean", [np.full(3, 200, np.uint8)] * N),
    "complex NaN": ("psum", [np.ones(3, np.complex64), np.full(3, complex(np.nan, 1), np.complex64)]
                    + [np.ones(3, np.complex64)] * 2),
    "complex inf - inf": ("psum", [np.full(3, complex(np.inf, 0), np.complex64),
                                   np.full(3, complex(-np.inf, 0), np.complex64)]
                          + [np.ones(3, np.complex64)] * 2),
    "int32 max of the minimum": ("pmax", [np.full(3, np.iinfo(np.int32).min, np.int32)] * N),
}


@pytest.mark.parametrize("case", SAME_AS_LAX)
def test_the_same_bits_as_jax_lax(case):
    name, rows = SAME_AS_LAX[case]
    program = lambda L, v: getattr(L, name)(v, "x")  # noqa: E731
    want = run(jax.lax, program, rows)
    np.testing.assert_array_equal(bits(run(jlax, program, rows)), bits(want), err_msg=case)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_keeps_the_signs_of_zeros(algorithm):
    """The +0 sum of -0s whichever algorithm runs; the lower rank's zero in max and min where
    the algorithm combines in rank order (the rings combine each block in ring order, so their
    ties follow it)."""
    minus = np.full(5, -0.0, f32)
    plus = np.zeros(5, f32)
    assert not np.signbit(run(None, "sum", [minus] * N, algorithm)).any()
    if algorithm.startswith("ring"):
        return
    assert np.signbit(run(None, "max", [minus, plus, plus, plus], algorithm)).all()
    assert not np.signbit(run(None, "max", [plus, minus, minus, minus], algorithm)).any()
    assert np.signbit(run(None, "min", [minus, plus, minus, plus], algorithm)).all()


@pytest.mark.parametrize("op", ["pmax", "pmin"])
@pytest.mark.parametrize("where", range(N))
def test_a_nan_wins_max_and_min(op, where):
    """jaccl's answer, numpy's and IEEE 754's: NaN (jax.lax on XLA:CPU: the others' max)."""
    rows = [np.arange(4, dtype=f32) + k for k in range(N)]
    rows[where] = rows[where].copy()
    rows[where][1] = np.nan
    got = run(jlax, lambda L, v: getattr(L, op)(v, "x"), rows)
    want = (np.max if op == "pmax" else np.min)(np.stack(rows), axis=0)
    assert np.isnan(want[1])
    for device in range(N):
        assert_equal(got[device], want)


@pytest.mark.parametrize("algorithm", ["naive", "mesh"])
def test_float16_sums_round_once(algorithm):
    """float16 sums accumulate in float32 in rank order and round once (numpy's float32 sum
    of the same rows, rounded), where XLA:CPU rounds after every addition."""
    rows = [np.random.default_rng(k).normal(size=4096).astype(np.float16) for k in range(N)]
    got = run(None, "sum", rows, algorithm)
    acc = np.zeros(4096, f32)
    for row in rows:
        acc = acc + row.astype(f32)
    for device in range(N):
        np.testing.assert_array_equal(bits(got[device]), bits(acc.astype(np.float16)))
    lax = run(jax.lax, lambda L, v: L.psum(v, "x"), rows)[0]
    assert 0 < np.count_nonzero(bits(lax) != bits(got[0])), "no row of the sample tells them apart"
    big = [np.full(3, 60000, np.float16), np.full(3, 60000, np.float16),
           np.full(3, -60000, np.float16), np.full(3, 1, np.float16)]
    np.testing.assert_array_equal(run(jlax, lambda L, v: L.psum(v, "x"), big)[0],
                                  np.full(3, 60001, np.float16))


def test_bfloat16_sums_agree_with_jax_lax():
    rows = [np.random.default_rng(k).normal(size=4096).astype(jnp.bfloat16) for k in range(N)]
    program = lambda L, v: L.psum(v, "x")  # noqa: E731
    np.testing.assert_array_equal(bits(run(jlax, program, rows)), bits(run(jax.lax, program, rows)))
