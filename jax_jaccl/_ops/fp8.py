"""FP8 rows for MoE dispatch: the cast DeepEP's low-latency dispatch makes on its send path.

Contract: quantize_fp8(x, scale_format) takes rows x [T, H] (H a multiple of 128, any float
dtype) and returns Fp8Rows(values [T, H] float8_e4m3fn, scales [T, H / 128]): one scale per
128 channels of a row, scale = amax / 448 with amax (the largest |x| of the 128) floored at
1e-4, so that value * scale gives x back to e4m3's precision. In float32 bits, as DeepEP's
kernel computes them: scale = amax * float32(1 / 448) and value = e4m3(x * (448 / amax)).
scale_format:

- "float32": scales float32, as above;
- "pow2": scales float32, that scale rounded up to a power of two s (value = e4m3(x * (1 / s)),
  exact reciprocals: value * scale only moves exponents);
- "ue8m0": scales uint8, the biased exponent e of that power of two (scale = 2 ** (e - 127)),
  what Blackwell's block-scaled matmuls read.

x * (448 / amax) is clamped to e4m3's +-448 before the cast (a plain cast turns anything
past 448, say 1000, into NaN; the product passes 448 only by rounding, or as inf or NaN when
the block holds them). A NaN in a block makes its values and its scale NaN. dequantize_fp8 is
the inverse map, in float32.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

BLOCK = 128                # channels per scale
E4M3_MAX = 448.0           # the largest finite float8_e4m3fn
AMAX_FLOOR = 1e-4          # an all-zero block still gets a usable scale
SCALE_FORMATS = ("float32", "pow2", "ue8m0")
FP8 = np.dtype(jnp.float8_e4m3fn)


class Fp8Rows(NamedTuple):
    """Rows quantised to float8_e4m3fn with one scale per 128 channels (see quantize_fp8)."""
    values: jax.Array      # [..., H] float8_e4m3fn
    scales: jax.Array      # [..., H / 128] float32, or uint8 exponents ("ue8m0")


def check_hidden(hidden: int, where: str):
    if hidden % BLOCK:
        raise ValueError(f"{where}: FP8 rows need a hidden size that is a multiple of {BLOCK} "
                         f"(one scale per {BLOCK} channels), got {hidden}")


def check_scale_format(scale_format, where: str):
    if scale_format not in SCALE_FORMATS:
        raise ValueError(f"{where}: scale_format must be one of {SCALE_FORMATS}, "
                         f"got {scale_format!r}")


def quantize_fp8(x, scale_format: str = "float32") -> Fp8Rows:
    """x [..., H] -> Fp8Rows (module docstring). Computed in float32."""
    check_scale_format(scale_format, "jaccl.quantize_fp8")
    check_hidden(x.shape[-1], "jaccl.quantize_fp8")
    blocks = x.astype(jnp.float32).reshape(x.shape[:-1] + (x.shape[-1] // BLOCK, BLOCK))
    # Barriers keep XLA from fusing per-block values into per-element loops, where it would
    # redo the block maxima for every element (3-6x slower here)
    amax = jax.lax.optimization_barrier(jnp.maximum(_block_max(jnp.abs(blocks)), AMAX_FLOOR))
    # Multiplications only, as DeepEP's kernel computes them: XLA:CPU divides by a broadcast
    # value through its reciprocal, so "x / scale" would not say which bits come out.
    scale = amax * np.float32(1 / E4M3_MAX)
    inverse = E4M3_MAX / amax
    if scale_format != "float32":
        # ceil(log2(scale)) exactly, from the float's bits (scale >= 1e-4 / 448 is normal)
        bits = jax.lax.bitcast_convert_type(scale, jnp.int32)
        exponent = (bits >> 23) - 127 + ((bits & 0x7FFFFF) != 0)
        exponent = jnp.clip(exponent, -126, 127)           # inf and NaN are kept below
        finite = jnp.isfinite(scale)
        scale = jnp.where(finite, _power_of_two(exponent), scale)
        inverse = jnp.where(finite, _power_of_two(-exponent), inverse)
    scale, inverse = jax.lax.optimization_barrier((scale, inverse))
    values = jnp.clip(blocks * inverse[..., None], -E4M3_MAX, E4M3_MAX).astype(FP8)
    values = values.reshape(x.shape)
    if scale_format == "ue8m0":  # 255 is E8M0's NaN; an infinite amax saturates at 2 ** 127
        biased = jnp.clip(exponent + 127, 0, 254)
        biased = jnp.where(jnp.isnan(scale), 255, jnp.where(jnp.isinf(scale), 254, biased))
        return Fp8Rows(values, biased.astype(jnp.uint8))
    return Fp8Rows(values, scale)


def _power_of_two(exponent):
    """2.0 ** exponent in float32, built from its bits (exponent in [-126, 127])."""
    return jax.lax.bitcast_convert_type((exponent + 127) << 23, jnp.float32)


def _block_max(a):
    """max over the last axis (a power of two) as halvings: elementwise maxima that XLA:CPU
    fuses into one vectorised loop, 5x faster there than its reduction (which returns the same
    value: max is exact; a NaN propagates either way)."""
    while a.shape[-1] > 1:
        half = a.shape[-1] // 2
        a = jnp.maximum(a[..., :half], a[..., half:])
    return a[..., 0]


def scales_as_float(scales):
    """float32 scales of either format (uint8 exponents are 2 ** (e - 127))."""
    if np.dtype(scales.dtype) == np.uint8:
        power = jnp.ldexp(jnp.ones(scales.shape, jnp.float32), scales.astype(jnp.int32) - 127)
        return jnp.where(scales == 255, jnp.nan, power)
    return scales.astype(jnp.float32)


def dequantize_fp8(rows: Fp8Rows, dtype=jnp.float32):
    """values * scale, each scale over its 128 channels, in float32, cast to dtype."""
    values, scales = rows
    v = values.astype(jnp.float32)
    blocks = v.reshape(v.shape[:-1] + (v.shape[-1] // BLOCK, BLOCK))
    return (blocks * scales_as_float(scales)[..., None]).reshape(v.shape).astype(dtype)


def check_fp8_rows(rows, where: str):
    """Trace-time checks of a caller's own (values, scales) pair."""
    values, scales = rows
    if np.dtype(values.dtype) != FP8:
        raise TypeError(f"{where}: FP8 values must be float8_e4m3fn, not {values.dtype}")
    if np.ndim(values) != 2:
        raise ValueError(f"{where}: FP8 values must be [tokens, hidden], got {np.shape(values)}")
    check_hidden(values.shape[1], where)
    want = (values.shape[0], values.shape[1] // BLOCK)
    if np.shape(scales) != want:
        raise ValueError(f"{where}: FP8 scales must be [tokens, hidden / {BLOCK}] = {want}, "
                         f"got {np.shape(scales)}")
    if np.dtype(scales.dtype) not in (np.dtype("float32"), np.dtype("uint8")):
        raise TypeError(f"{where}: FP8 scales must be float32 (or uint8 UE8M0 exponents), "
                        f"not {scales.dtype}")
