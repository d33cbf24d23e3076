"""Every dtype jax has, drawn from jax itself: jaccl carries it (the engine's types, and the
narrow ones, _common.NARROW: float8 of every kind, int4, uint4, float4_e2m1fn) or refuses it at
trace time for a stated reason (REFUSED), so a dtype a later jax adds fails here until it is one
or the other. The narrow types against jax.lax, one process x 4 devices, bit for bit: every bit
pattern (NaNs, infinities, -0 and subnormals among them) through every collective, their
reductions widened as XLA:CPU widens them, the ops that only move elements moving bytes (sub-byte
types packed two to a byte where the shape allows, widened where not)."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from jax_jaccl import lax as jlax
from jax_jaccl._ops import _common

from util import N, assert_equal, every_bit_pattern, mesh1d, put, stacked

# The dtypes jax has that jaccl refuses, and why (jax 0.12.1 on CPU).
REFUSED = {
    "int1": "XLA carries it as a predicate, jax.lax's sums of it are not integer sums",
    "uint1": "jax cannot broadcast it",
    "int2": "XLA:CPU refuses its reductions and corrupts memory moving it",
    "uint2": "XLA:CPU refuses its reductions and corrupts memory moving it",
    "float6_e2m3fn": "XLA:CPU refuses its reductions",
    "float6_e3m2fn": "XLA:CPU refuses its reductions",
}


def jax_dtypes() -> dict:
    """{name: dtype} of every scalar type jax.numpy offers that makes arrays on this backend."""
    found = {}
    for name in dir(jnp):
        kind = getattr(jnp, name)
        if name.startswith("_") or not callable(kind) or not hasattr(kind, "dtype"):
            continue
        try:
            dtype = np.dtype(kind)
            with warnings.catch_warnings():  # the 8-byte types without x64: made 4-byte
                warnings.simplefilter("ignore")
                jnp.zeros((2,), dtype).block_until_ready()
        except Exception:  # noqa: BLE001 (not an array type here: object, complex32, ...)
            continue
        found[dtype.name] = dtype
    return found


def test_every_dtype_jax_has_is_carried_or_refused_with_a_reason():
    carried = set(_common.SUPPORTED_DTYPES) | set(_common.NARROW)
    mesh = mesh1d()
    for name, dtype in jax_dtypes().items():
        if name in REFUSED:
            assert dtype not in carried, name
            x = jax.ShapeDtypeStruct((N,), dtype, sharding=NamedSharding(mesh, P("x")))
            with pytest.raises(TypeError, match=f"dtype {name} is not supported"):
                jax.eval_shape(stacked(lambda v: jlax.all_gather(v, "x"), mesh), x)
        else:
            assert dtype in carried, (
                f"jax has dtype {name}, which jaccl neither carries nor refuses: carry it "
                "(_ops/_common.py) or name it in REFUSED with the reason")


def cases(ndim, n):
    """name -> (jaccl's program, jax.lax's program) of every collective on arrays of `ndim`."""
    last = ndim - 1
    shift = [(i, (i + 1) % n) for i in range(n)]
    both = lambda f: (f(jlax), f(jax.lax))  # noqa: E731
    out = {op: both(lambda L, op=op: lambda x: getattr(L, op)(x, "x"))
           for op in ("psum", "pmax", "pmin")}
    out["psum_scatter"] = both(lambda L: lambda x: L.psum_scatter(x, "x", scatter_dimension=last,
                                                                  tiled=True))
    out["all_gather/tiled"] = both(lambda L: lambda x: L.all_gather(x, "x", tiled=True))
    out["all_gather/last"] = both(lambda L: lambda x: L.all_gather(x, "x", axis=last, tiled=True))
    out["all_gather/new-last"] = both(lambda L: lambda x: L.all_gather(x, "x", axis=ndim))
    out["ppermute"] = both(lambda L: lambda x: L.ppermute(x, "x", shift))
    out["ppermute/partial"] = both(lambda L: lambda x: L.ppermute(x, "x", [(0, n - 1), (2, 1)]))
    out["all_to_all/last"] = both(lambda L: lambda x: L.all_to_all(x, "x", last, 0, tiled=True))
    out["all_to_all/first"] = both(lambda L: lambda x: L.all_to_all(x, "x", 0, last, tiled=True))
    return out


# per device (4 rows each): 16 columns hold every 8-bit pattern once over the devices; for the
# sub-byte types 8 columns pack (an even last axis, cut in 4 pieces of 2), 12 pack where the op
# keeps the axis whole and widen where all_to_all cuts it in 4 pieces of 3, 7 widen everywhere
WHOLE, SUB_BYTE_SHAPES = (N * N, 16), [(N * N, 8), (N * N, 12), (N * N, 7)]
CASES = [(d.name, shape) for d in _common.NARROW
         for shape in (SUB_BYTE_SHAPES if d in _common.SUB_BYTE else [WHOLE])]


@pytest.mark.parametrize("name, shape", CASES, ids=[f"{d}-{s[1]}" for d, s in CASES])
def test_narrow_dtypes_match_jax_lax_bit_for_bit(name, shape):
    dtype = np.dtype(getattr(jnp, name))
    mesh = mesh1d()
    data = every_bit_pattern(dtype, shape, seed=len(name))
    for case, (ours, theirs) in cases(len(shape), N).items():
        if shape[-1] % N and case.startswith(("psum_scatter", "all_to_all/last")):
            continue  # the last axis does not split over 4 devices
        x = put(data, mesh)
        if name == "float8_e8m0fnu" and case in ("pmax", "pmin"):
            # its 0x00, 2^-127, is a float32 subnormal, which XLA:CPU's float32 max and min keep
            # in arrays of 16 elements or more and jaccl's flush (test_float_edges.py's
            # test_float32_min_and_max_of_subnormals_in_long_arrays): not a narrow type's matter
            x = put(np.maximum(data.view(np.uint8), 1).view(dtype), mesh)
        got = stacked(ours, mesh)(x)
        want = stacked(theirs, mesh)(x)
        assert_equal(got, want, err_msg=f"{name} {case}")


@pytest.mark.parametrize("name", ["float8_e4m3fn", "int4", "float4_e2m1fn"])
def test_narrow_rows_through_ragged_all_to_all(name):
    """ragged_all_to_all (which XLA:CPU does not run) on narrow rows against the numpy model:
    2-D rows (sub-byte ones packed) and 1-D ones (widened)."""
    dtype = np.dtype(getattr(jnp, name))
    mesh = mesh1d()
    for row_shape in ((4,), ()):
        data = every_bit_pattern(dtype, (N * N,) + row_shape, seed=3)
        x = put(data, mesh)
        # every device sends its row k to device k, into slot (its index)
        ones = np.ones(N, np.int32)
        offsets = np.arange(N, dtype=np.int32)

        def program(v):
            me = jax.lax.axis_index("x")
            out = jnp.zeros_like(v)
            return jlax.ragged_all_to_all(v, out, offsets, ones, jnp.full(N, me, jnp.int32), ones,
                                          axis_name="x")
        got = np.asarray(stacked(program, mesh, in_spec=P("x"))(x)).reshape((N, N) + row_shape)
        sent = data.reshape((N, N) + row_shape)  # [sender, row]
        want = np.swapaxes(sent, 0, 1)  # device k's slot j: sender j's row k
        assert_equal(got, want, err_msg=f"{name} rows {row_shape}")


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"])
def test_narrow_floats_differentiate_as_jax_lax(name):
    """The gradient through the ops that move narrow floats as bytes (a bitcast has no
    derivative): the tangent moves widened, as jax.lax's gradient does."""
    dtype = np.dtype(getattr(jnp, name))
    mesh = mesh1d()
    x = put(np.linspace(-2, 2, N * 8).reshape(N, 8).astype(np.float32), mesh)
    shift = [(i, (i + 1) % N) for i in range(N)]

    def loss(L):
        def f(v):
            w = v.astype(dtype)
            moved = (L.all_gather(w, "x", axis=1, tiled=True).sum(axis=1)
                     + L.ppermute(w, "x", shift).sum(axis=1)
                     + L.all_to_all(w, "x", 1, 1, tiled=True).sum(axis=1))
            return (moved.astype(np.float32) ** 2).sum()
        return f

    grads = [stacked(lambda v: jax.grad(loss(L))(v), mesh)(x) for L in (jlax, jax.lax)]
    assert np.abs(np.asarray(grads[1])).sum() > 0
    assert_equal(grads[0], grads[1])

