"""MoE dispatch and combine, one process x 4 devices, against the jax.numpy reference
(moe_reference.py): bitwise for dispatch (a copy) and combine, for float32, bfloat16 and
float16; drops past capacity; gradients with jax.grad; trace-time and run-time errors."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_jaccl as jaccl
from jax_jaccl import _ext
import moe_reference as ref
from moe_cases import CASES, expert, inputs, smap, stacked, tanh_expert_round_trips

from util import N, dtype_id, mesh1d, put



@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.float16], ids=dtype_id)
@pytest.mark.parametrize("case", CASES)
def test_dispatch_and_combine_match_reference(case, dtype):
    matches_reference(case, dtype)


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.float16], ids=dtype_id)
def test_combine_streams_longer_than_their_rings_match_reference(dtype):
    """Within a host each other rank's rows reach the combine through a ring of rows that the
    sum empties token by token (xla_ffi/moe/moe.cc, RowRings): streams that wrap their rings
    give the reference's bits, and every stream went through a ring."""
    before = _ext.engine.moe_streams_through_rings()
    matches_reference("rings", dtype)
    assert _ext.engine.moe_streams_through_rings() - before == N * (N - 1)


def matches_reference(case, dtype):
    x, idx, w, E, C = inputs(case, dtype)

    def ours(x, i, w):
        recv, count, handle = jaccl.moe_dispatch(x, i, w, num_experts=E, capacity=C, axis_name="x")
        out = jaccl.moe_combine(expert(recv), handle, w, axis_name="x")
        return stacked(recv, count, handle.dropped, out)

    def theirs(x, i, w):
        recv, count, dropped = ref.dispatch(x, i, num_experts=E, capacity=C, axis="x")
        products, ok = ref.pair_products(expert(recv), i, w, num_experts=E, capacity=C, axis="x")
        return stacked(recv, count, dropped) + (products, ok)

    args = put(x, mesh1d()), put(idx, mesh1d()), put(w, mesh1d())
    recv, count, dropped, out = smap(ours, 3, 4)(*args)
    f_recv, f_count, f_dropped, products, ok = smap(theirs, 3, 5)(*args)
    want = jax.jit(ref.accumulate, static_argnums=2)(products, ok, x.dtype)
    np.testing.assert_array_equal(np.asarray(count), np.asarray(f_count))
    np.testing.assert_array_equal(np.asarray(dropped), np.asarray(f_dropped))
    np.testing.assert_array_equal(np.asarray(recv, np.float32), np.asarray(f_recv, np.float32))
    np.testing.assert_array_equal(np.asarray(out, np.float32).reshape(want.shape),
                                  np.asarray(want, np.float32))
    if case == "all-to-one-expert":
        assert np.asarray(dropped)[0, 0] == N * CASES[case][0] - C  # expert 0 overflowed


def test_rows_are_ordered_by_source_rank_and_token():
    x, idx, w, E, C = inputs("random", np.float32)
    x = np.repeat(np.arange(N * 16, dtype=np.float32)[:, None], 8, axis=1)  # row id as value

    def ours(x, i, w):
        recv, count, _ = jaccl.moe_dispatch(x, i, w, num_experts=E, capacity=C, axis_name="x")
        return stacked(recv, count)

    recv, count = smap(ours, 3, 2)(put(x, mesh1d()), put(idx, mesh1d()), put(w, mesh1d()))
    recv, count = np.asarray(recv), np.asarray(count)
    for rank in range(N):
        for j in range(E // N):
            ids = recv[rank, j, :count[rank, j], 0]
            assert np.all(np.diff(ids) > 0), ids      # (rank, token) ascending
            assert np.all(recv[rank, j, count[rank, j]:] == 0)  # padding is zero


@pytest.mark.parametrize("case", ["random", "all-to-one-expert", "k8-eloc4", "k12"])
def test_gradients_match_reference(case):
    x, idx, w, E, C = inputs(case, np.float32, seed=3)
    scale = np.random.default_rng(4).normal(size=(N * CASES[case][0], x.shape[1])).astype(np.float32)

    def loss(dispatch_combine):
        def f(x, w, i, s):
            out = jax.shard_map(dispatch_combine, mesh=mesh1d(), in_specs=(P("x"),) * 3,
                                out_specs=P("x"))(x, i, w)
            return jnp.sum(out * s)
        return jax.jit(jax.grad(f, argnums=(0, 1)))

    ours, theirs = tanh_expert_round_trips(E, C)
    args = put(x, mesh1d()), put(w, mesh1d()), put(idx, mesh1d()), put(scale, mesh1d())
    (dx, dw), (rx, rw) = loss(ours)(*args), loss(theirs)(*args)
    np.testing.assert_allclose(np.asarray(dx), np.asarray(rx), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(dw), np.asarray(rw), rtol=1e-5, atol=1e-6)
    assert np.abs(np.asarray(dx)).sum() > 0 and np.abs(np.asarray(dw)).sum() > 0


@pytest.mark.parametrize("call, error, match", [
    (lambda x, i, w: jaccl.moe_dispatch(x, i[:, :1], w, num_experts=8, capacity=4, axis_name="x"),
     ValueError, "topk_weights .* must have topk_idx's shape"),
    (lambda x, i, w: jaccl.moe_dispatch(x, i, w, num_experts=6, capacity=4, axis_name="x"),
     ValueError, "num_experts=6 must be a positive multiple of the layout.s ranks 4"),
    (lambda x, i, w: jaccl.moe_dispatch(x, i, w, num_experts=8, capacity=0, axis_name="x"),
     ValueError, "capacity must be a positive int"),
    (lambda x, i, w: jaccl.moe_dispatch(x.astype(jnp.int32), i, w, num_experts=8, capacity=4,
                                        axis_name="x"), TypeError, "float32, bfloat16 or float16"),
    (lambda x, i, w: jaccl.moe_dispatch(x, i.astype(jnp.int16), w, num_experts=8, capacity=4,
                                        axis_name="x"), TypeError, "topk_idx must be int32"),
    (lambda x, i, w: jaccl.moe_dispatch(x[:, 0], i, w, num_experts=8, capacity=4, axis_name="x"),
     ValueError, r"x must be \[tokens, hidden\]"),
    (lambda x, i, w: jaccl.moe_combine(
        x[None], jaccl.moe_dispatch(x, i, w, num_experts=8, capacity=4, axis_name="x")[2], w,
        axis_name="x"), ValueError, r"y must be \[E_loc=2, capacity=4, hidden\]"),
])
def test_trace_time_errors(call, error, match):
    x, idx, w, _, _ = inputs("random", np.float32)
    with pytest.raises(error, match=match):
        smap(lambda *a: stacked(*jax.tree.leaves(call(*a)))[:1], 3, 1).lower(
            put(x, mesh1d()), put(idx, mesh1d()), put(w, mesh1d()))


@pytest.mark.parametrize("case", ["random", "all-to-one-expert", "k8-eloc4", "k12"])
def test_the_arrival_schedule_gives_the_same_bits(case):
    """JACCL_MOE_SCHEDULE=arrival (combine reduces rows as they arrive instead of remote rows
    first): the same results as the reference, bit for bit."""
    from jax_jaccl import _settings

    with _settings.override(moe_schedule="arrival"):
        matches_reference(case, np.float32)


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("case", ["k12", "rings"])
def test_the_weights_gradient_sums_each_dot_in_element_order(case, dtype):
    """combine's gradient for the weights, <dout[t], row(t, k)> per pair, sums over the elements
    in ascending order in float32 (the GPU kernel's order): bitwise against that sum written out,
    with 12 pairs a token (more than the CPU sums at once) and rows of 40 elements, and with
    streams longer than the rings they pass through (every combine of the program took them so:
    the gradient's, and the forward's where jax keeps it)."""
    before = _ext.engine.moe_streams_through_rings()
    x, idx, w, E, C = inputs(case, dtype, seed=5)
    rng = np.random.default_rng(6)  # magnitudes 2^-12..2^12: sums that round, in any type
    s = (rng.normal(size=x.shape) * 2.0 ** rng.integers(-12, 13, size=x.shape)).astype(dtype)

    def ours(x, i, w, s):
        recv, _, handle = jaccl.moe_dispatch(x, i, w, num_experts=E, capacity=C, axis_name="x")
        y = expert(recv)

        def loss(w):
            out = jaccl.moe_combine(y, handle, w, axis_name="x").astype(jnp.float32)
            return jnp.sum(out * s.astype(jnp.float32))

        rows, ok = ref.pair_products(y, i, jnp.ones_like(w), num_experts=E, capacity=C, axis="x")
        return jax.grad(loss)(w), rows, ok

    args = tuple(put(a, mesh1d()) for a in (x, idx, w, s))
    program = smap(ours, 4, 3).lower(*args).compile()
    dw, rows, ok = (np.asarray(a) for a in program(*args))
    if case == "rings":
        combines = program.as_text().count('custom_call_target="jaccl_moe_combine"')
        assert combines >= 1
        assert _ext.engine.moe_streams_through_rings() - before == combines * N * (N - 1)
    d = np.asarray(s, np.float32)
    want = np.zeros(dw.shape, np.float32)
    for i in range(x.shape[1]):  # one float32 product and one addition per element, in order
        want = want + d[:, None, i] * rows[:, :, i]
    want = np.where(ok, want, np.float32(0))
    np.testing.assert_array_equal(dw.view(np.uint32), want.view(np.uint32))
