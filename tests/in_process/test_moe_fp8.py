"""FP8 MoE dispatch, one process x 4 devices: jaccl.quantize_fp8 against the numpy rule
(fp8_reference.py) bit for bit in every scale format, and within e4m3's rounding of x;
moe_dispatch(fp8=True) and with a caller's (values, scales) pair against the reference
dispatch quantised in numpy; the straight-through gradient; trace-time errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import fp8_reference as fref
import jax_jaccl as jaccl
import moe_reference as ref
from moe_cases import FP8_CASE, fp8_dispatches, fp8_routing, fp8_rows, smap, stacked

from util import N, mesh1d, put

FORMATS = ("float32", "pow2", "ue8m0")
T, H, K, E, C = FP8_CASE


def rows(dtype=np.float32, seed=0, magnitudes=(-12, 12)):
    return fp8_rows(N, dtype, seed, magnitudes)


def as_bits(a):
    return np.asarray(a).view(np.uint8)


@pytest.mark.parametrize("scale_format", FORMATS)
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
def test_quantize_follows_the_rule_bit_for_bit(scale_format, dtype):
    x = rows(dtype)
    values, scales = jax.jit(jaccl.quantize_fp8, static_argnums=1)(x, scale_format)
    want_values, want_scales = fref.quantize(x.astype(np.float32), scale_format)
    assert values.dtype == jnp.float8_e4m3fn and values.shape == x.shape
    assert scales.shape == (N * T, H // 128)
    assert scales.dtype == (np.uint8 if scale_format == "ue8m0" else np.float32)
    np.testing.assert_array_equal(as_bits(values), as_bits(want_values))
    np.testing.assert_array_equal(np.asarray(scales), want_scales)


@pytest.mark.parametrize("scale_format", FORMATS)
def test_dequantized_rows_are_within_e4m3_rounding(scale_format):
    """|x - values * scale| <= 2^-4 |x| (3 mantissa bits, half an ulp) + 2^-10 scale (the
    subnormal step of e4m3, halved); the 1000 survives the cast (no NaN)."""
    x = rows()
    q = jaccl.quantize_fp8(x, scale_format)
    back = np.asarray(jaccl.dequantize_fp8(q))
    np.testing.assert_array_equal(back, fref.dequantize(*map(np.asarray, q)))
    scale = fref.dequantize(np.ones(x.shape, fref.E4M3), np.asarray(q.scales))  # per channel
    assert np.all(np.abs(back - x) <= np.exp2(-4) * np.abs(x) + np.exp2(-10) * scale)
    assert np.isfinite(back).all() and abs(back[1, 5] - 1000) <= 1000 / 16


@pytest.mark.parametrize("pair", [False, True], ids=["fp8=True", "quantised-pair"])
@pytest.mark.parametrize("scale_format", FORMATS)
def test_dispatch_sends_the_quantised_rows(scale_format, pair):
    ours, theirs = fp8_dispatches(scale_format, pair)
    args = [put(a, mesh1d()) for a in (rows(),) + fp8_routing(N)]
    outputs = (smap(lambda *a: stacked(*ours(*a)), 3, 3)(*args),
               smap(lambda *a: stacked(*theirs(*a)), 3, 2)(*args))
    (values, scales, count), (f_recv, f_count) = jax.tree.map(np.asarray, outputs)
    np.testing.assert_array_equal(np.asarray(count), np.asarray(f_count))
    assert values.dtype == jnp.float8_e4m3fn and values.shape == (N, E // N, C, H)
    for rank in range(N):
        want_values, want_scales = fref.expected_dispatch(f_recv[rank], count[rank], scale_format)
        np.testing.assert_array_equal(as_bits(values[rank]), as_bits(want_values))
        np.testing.assert_array_equal(np.asarray(scales[rank]), want_scales)
    assert int(np.asarray(count).sum()) > 0


def test_the_cast_is_straight_through_for_gradients():
    """JAX hands dispatch the cotangent of its float8 values in float8 (unscaled): with
    power-of-two scales of 2^-9 .. 2^-1 and a loss of small integers every such cotangent is
    exact in e4m3, and d/dx of sum(dequantised recv * S) equals the unquantised dispatch's
    d/dx of sum(recv * S), and the reference dispatch's (moe_reference.py: jax.numpy over
    all-gathered rows, nothing of jaccl's)."""
    x = rows(seed=2, magnitudes=(0, 7))
    x[0, :128] = 1.0  # no zero block (its scale, 2^-22, would flush every cotangent)
    idx, w = fp8_routing(N, seed=2)
    S = np.random.default_rng(3).integers(-2, 3, size=(N, E // N, C, H)).astype(np.float32)

    def loss(fp8, reference=False):
        def layer(x, i, w, s):
            if reference:
                recv, _, _ = ref.dispatch(x, i, num_experts=E, capacity=C, axis="x")
                return jnp.sum(recv * s[0])[None]
            recv, _, _ = jaccl.moe_dispatch(x, i, w, num_experts=E, capacity=C, axis_name="x",
                                            fp8=fp8, scale_format="pow2")
            rows = jaccl.dequantize_fp8(recv) if fp8 else recv
            return jnp.sum(rows * s[0])[None]

        def f(x, s):
            return jnp.sum(jax.shard_map(layer, mesh=mesh1d(), in_specs=(P("x"),) * 4,
                                         out_specs=P("x"))(x, idx, w, s))
        return jax.jit(jax.grad(f))(put(x, mesh1d()), put(S, mesh1d()))

    idx, w = put(idx, mesh1d()), put(w, mesh1d())

    got, want = np.asarray(loss(True)), np.asarray(loss(False))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, np.asarray(loss(False, reference=True)))
    assert np.abs(want).sum() > 0


def test_a_quantised_pair_has_no_gradient():
    x = rows()
    idx, w = (put(a, mesh1d()) for a in fp8_routing(N))

    def f(x):
        def layer(x, i, w):
            pair = tuple(jaccl.quantize_fp8(x))
            recv, _, _ = jaccl.moe_dispatch(pair, i, w, num_experts=E, capacity=C, axis_name="x")
            return jnp.sum(jaccl.dequantize_fp8(recv))[None]
        return jnp.sum(jax.shard_map(layer, mesh=mesh1d(), in_specs=(P("x"),) * 3,
                                     out_specs=P("x"))(x, idx, w))

    with pytest.raises(TypeError, match="already quantised .* has no gradient"):
        jax.jit(jax.grad(f)).lower(put(x, mesh1d()))


@pytest.mark.parametrize("make, error, match", [
    (lambda x: dict(x=x[:, :200], fp8=True), ValueError, "multiple of 128"),
    (lambda x: dict(x=x, fp8=True, scale_format="e5m2"), ValueError, "scale_format must be"),
    (lambda x: dict(x=(x.astype(jnp.bfloat16), jnp.ones((x.shape[0], 2)))), TypeError,
     "float8_e4m3fn"),
    (lambda x: dict(x=(x.astype(jnp.float8_e4m3fn), jnp.ones((x.shape[0], 3)))), ValueError,
     r"scales must be \[tokens, hidden / 128\]"),
    (lambda x: dict(x=(x.astype(jnp.float8_e4m3fn), jnp.ones((x.shape[0], 2), jnp.int32))),
     TypeError, "float32 .*or uint8"),
])
def test_trace_time_errors(make, error, match):
    x = rows()
    idx, w = fp8_routing(N)

    def layer(x, i, w):
        recv, _, _ = jaccl.moe_dispatch(topk_idx=i, topk_weights=w, num_experts=E, capacity=C,
                                        axis_name="x", **make(x))
        return jax.tree.leaves(recv)[0][None]

    with pytest.raises(error, match=match):
        smap(layer, 3, 1).lower(put(x, mesh1d()), put(idx, mesh1d()), put(w, mesh1d()))
