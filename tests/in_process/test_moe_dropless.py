"""Dropless MoE dispatch, one process x 4 devices: recv_x [M, H] holds every routed row, the
local experts' groups packed one after another in (source rank, token) order with recv_count
as their sizes, zero past them; against the reference dispatch with room for every row,
packed in numpy; combine of [M, H] expert outputs bitwise against the reference; gradients;
jax.lax.ragged_dot on the groups against a per-expert matmul; FP8 rows dropless against the
reference's rows quantised in numpy (fp8_reference.py); errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_jaccl as jaccl
import fp8_reference as fref
import moe_reference as ref
from moe_cases import (CASES, dropless_dispatches, inputs, packed, smap, stacked,
                       tanh_expert_round_trips)

from util import N, dtype_id, mesh1d, put


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("case", CASES)
def test_dropless_dispatch_and_combine_match_reference(case, dtype):
    x, idx, w, E, _ = inputs(case, dtype)
    T, K = CASES[case][0], CASES[case][2]
    M = T * K * N                 # dropless rows
    ours, theirs = dropless_dispatches(case)

    def reference(*a):  # products and ok stay [T, K, ...] per device: accumulate takes them
        recv, count, dropped, products, ok = theirs(*a)
        return stacked(recv, count, dropped) + (products, ok)

    args = put(x, mesh1d()), put(idx, mesh1d()), put(w, mesh1d())
    results = smap(lambda *a: stacked(*ours(*a)), 3, 4)(*args)
    recv, count, dropped, out = (np.asarray(a) for a in results)
    f_recv, f_count, f_dropped, products, ok = smap(reference, 3, 5)(*args)
    want = jax.jit(ref.accumulate, static_argnums=2)(products, ok, x.dtype)
    f_recv = np.asarray(f_recv)
    assert recv.shape == (N, M, x.shape[1])
    np.testing.assert_array_equal(count, np.asarray(f_count))
    assert not dropped.any() and not np.asarray(f_dropped).any()
    for rank in range(N):
        np.testing.assert_array_equal(recv[rank].astype(np.float32),
                                      packed(np.asarray(f_recv[rank], np.float32), count[rank], M))
    np.testing.assert_array_equal(out.astype(np.float32).reshape(want.shape),
                                  np.asarray(want, np.float32))


def test_every_row_arrives_where_capacity_would_drop():
    """All tokens to expert 0: a capacity of 5 drops most; dropless keeps every one."""
    x, idx, w, E, C = inputs("all-to-one-expert", np.float32)

    def counts(dropless):
        def f(x, i, w):
            kwargs = dict(dropless=True) if dropless else dict(capacity=C)
            _, count, handle = jaccl.moe_dispatch(x, i, w, num_experts=E, axis_name="x", **kwargs)
            return stacked(count, handle.dropped)
        return [np.asarray(a) for a in smap(f, 3, 2)(put(x, mesh1d()), put(idx, mesh1d()),
                                                         put(w, mesh1d()))]

    (capped, dropped), (whole, none) = counts(False), counts(True)
    assert dropped[0, 0] > 0 and not none.any()
    assert whole[0, 0] == capped[0, 0] + dropped[0, 0] == N * CASES["all-to-one-expert"][0]


def test_gradients_match_reference():
    x, idx, w, E, _ = inputs("k8-eloc4", np.float32, seed=3)
    T = CASES["k8-eloc4"][0]
    s = np.random.default_rng(4).normal(size=x.shape).astype(np.float32)

    ours, theirs = tanh_expert_round_trips(E, T * N, dropless=True)

    def grads(layer):
        def f(x, w, i, s):
            out = jax.shard_map(layer, mesh=mesh1d(), in_specs=(P("x"),) * 3, out_specs=P("x"))(x, i, w)
            return jnp.sum(out * s)
        return jax.jit(jax.grad(f, argnums=(0, 1)))(put(x, mesh1d()), put(w, mesh1d()),
                                                    put(idx, mesh1d()), put(s, mesh1d()))

    # The weights' gradient <dout, y> is summed over H left to right by jaccl and in XLA's
    # vectorised order by the reference (which depends on the CPU); its terms of order 1
    # cancel to ~1e-2, so the orders differ by ~1e-6 there (seen on an AVX-512 machine).
    for a, b in zip(grads(ours), grads(theirs)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
        assert np.abs(np.asarray(b)).sum() > 0


def test_ragged_dot_takes_the_groups_as_they_are():
    """ragged_dot(recv_x, W[E_loc], group_sizes=recv_count) equals each row times its own
    expert's matrix (found from the packed layout), and zero past the groups."""
    x, idx, w, E, _ = inputs("random", np.float32)
    E_loc, F = E // N, 5
    weights = np.random.default_rng(1).normal(size=(N * E_loc, x.shape[1], F)).astype(np.float32)

    def f(x, i, w, ew):
        recv, count, _ = jaccl.moe_dispatch(x, i, w, num_experts=E, axis_name="x", dropless=True)
        y = jax.lax.ragged_dot(recv, ew, group_sizes=count)
        return stacked(recv, count, y)

    recv, count, y = (np.asarray(a) for a in smap(f, 4, 3)(
        put(x, mesh1d()), put(idx, mesh1d()), put(w, mesh1d()), put(weights, mesh1d())))
    for rank in range(N):
        group = np.repeat(np.arange(E_loc), count[rank])
        rows = len(group)
        want = np.einsum("mh,mhf->mf", recv[rank, :rows], weights[rank * E_loc + group])
        np.testing.assert_allclose(y[rank, :rows], want, rtol=1e-5, atol=1e-5)
        assert not y[rank, rows:].any() and not recv[rank, rows:].any()


def test_fp8_rows_dropless():
    """FP8 dropless dispatch against the reference's rows (jax.numpy, room for every row),
    packed by group and quantised in numpy (fp8_reference.py): values and scales bitwise."""
    T, H, K, E = 6, 128, 2, 8
    rng = np.random.default_rng(2)
    x = rng.normal(size=(N * T, H)).astype(np.float32)
    idx = np.stack([rng.choice(E, K, replace=False) for _ in range(N * T)]).astype(np.int32)
    w = rng.random((N * T, K)).astype(np.float32)

    def f(x, i, w):
        recv, count, _ = jaccl.moe_dispatch(x, i, w, num_experts=E, axis_name="x", dropless=True,
                                            fp8=True)
        rows, want_count, _ = ref.dispatch(x, i, num_experts=E, capacity=T * N, axis="x")
        return stacked(recv.values.astype(jnp.float32), recv.scales, count, rows, want_count)

    values, scales, count, rows, want_count = (np.asarray(a) for a in smap(f, 3, 5)(
        put(x, mesh1d()), put(idx, mesh1d()), put(w, mesh1d())))
    m = T * K * N
    assert values.shape == (N, m, H) and scales.shape == (N, m, 1)
    for rank in range(N):
        np.testing.assert_array_equal(count[rank], want_count[rank])
        want_values, want_scales = fref.quantize(packed(rows[rank], count[rank], m))
        valid = np.arange(m) < count[rank].sum()
        np.testing.assert_array_equal(values[rank], np.where(valid[:, None], want_values.astype(
            np.float32), 0), err_msg=f"values of rank {rank}")
        np.testing.assert_array_equal(scales[rank], np.where(valid[:, None], want_scales, 0),
                                      err_msg=f"scales of rank {rank}")


@pytest.mark.parametrize("kwargs, match", [
    (dict(dropless=True, capacity=4), "dropless=True takes no capacity"),
    (dict(), r"capacity must be a positive int \(or dropless=True\)"),
])
def test_trace_time_errors(kwargs, match):
    x, idx, w, E, _ = inputs("random", np.float32)

    def f(x, i, w):
        recv, _, _ = jaccl.moe_dispatch(x, i, w, num_experts=E, axis_name="x", **kwargs)
        return stacked(recv)

    with pytest.raises(ValueError, match=match):
        smap(f, 3, 1).lower(put(x, mesh1d()), put(idx, mesh1d()), put(w, mesh1d()))


def test_combine_names_the_dropless_shape():
    x, idx, w, E, _ = inputs("random", np.float32)
    M = CASES["random"][0] * CASES["random"][2] * N

    def f(x, i, w):
        recv, _, h = jaccl.moe_dispatch(x, i, w, num_experts=E, axis_name="x", dropless=True)
        return stacked(jaccl.moe_combine(recv[None], h, w, axis_name="x"))

    with pytest.raises(ValueError, match=rf"y must be \[rows={M}, hidden\] \(dispatch was dropless\)"):
        smap(f, 3, 1).lower(put(x, mesh1d()), put(idx, mesh1d()), put(w, mesh1d()))
