"""FP8 rows in numpy (ml_dtypes' float8_e4m3fn), written from the stated rule, not from
jax_jaccl/_ops/fp8.py: per row, per 128 channels, amax = max(|x|, 1e-4), scale = amax *
float32(1/448) (or that rounded up to a power of two s, or s's biased exponent as a byte),
values = x * (448 / amax) (x * (1 / s)) clamped to +-448 and rounded to e4m3."""

from __future__ import annotations

import ml_dtypes
import numpy as np

E4M3 = ml_dtypes.float8_e4m3fn


def quantize(x: np.ndarray, scale_format: str = "float32"):
    x = np.asarray(x, np.float32)
    blocks = x.reshape(x.shape[:-1] + (x.shape[-1] // 128, 128))
    amax = np.maximum(np.abs(blocks).max(axis=-1), np.float32(1e-4))
    scale = amax * np.float32(1 / 448)
    inverse = np.float32(448) / amax
    if scale_format != "float32":
        m, e = np.frexp(scale)
        e = np.where(m == 0.5, e - 1, e)
        scale = np.ldexp(np.float32(1), e).astype(np.float32)
        inverse = np.ldexp(np.float32(1), -e).astype(np.float32)
    values = np.clip(blocks * inverse[..., None], -448, 448).astype(E4M3).reshape(x.shape)
    if scale_format == "ue8m0":
        return values, (e + 127).astype(np.uint8)
    return values, scale


def dequantize(values, scales) -> np.ndarray:
    scales = np.asarray(scales)
    if scales.dtype == np.uint8:
        scales = np.ldexp(np.float32(1), scales.astype(np.int32) - 127).astype(np.float32)
    v = np.asarray(values).astype(np.float32)
    blocks = v.reshape(v.shape[:-1] + (v.shape[-1] // 128, 128))
    return (blocks * scales[..., None]).reshape(v.shape)


def valid_rows(rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """rows [E_loc, C, W] with the padding rows (c >= counts[j]) set to zero."""
    keep = np.arange(rows.shape[1])[None, :] < np.asarray(counts)[:, None]
    return np.where(keep[..., None], rows, np.zeros((), rows.dtype))


def expected_dispatch(recv_rows, counts, scale_format):
    """What FP8 dispatch gives one device: the reference dispatch's rows [E_loc, C, H]
    quantised, padding rows zero in values and scales."""
    values, scales = quantize(np.asarray(recv_rows, np.float32), scale_format)
    return valid_rows(values, counts), valid_rows(scales, counts)
