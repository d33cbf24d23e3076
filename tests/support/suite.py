"""The battery every layout runs: each collective through an adapter with jax.lax's
signatures, so one function describes both the jaccl program and the jax.lax reference."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jax_jaccl as jaccl

N_DEFAULT = 4


class Jaccl:
    """The collectives under test, with jax.lax's signatures."""

    all_gather = staticmethod(jaccl.all_gather)
    all_to_all = staticmethod(jaccl.all_to_all)
    ppermute = staticmethod(jaccl.ppermute)

    @staticmethod
    def reduce(v, op, axis):
        return jaccl.all_reduce(v, axis, op=op)

    @staticmethod
    def psum_scatter(v, axis_name, **kwargs):
        return jaccl.reduce_scatter(v, axis_name, **kwargs)

    @staticmethod
    def reduce_scatter(v, op, axis_name):
        return jaccl.reduce_scatter(v, axis_name, op=op, tiled=True)


class Lax:
    all_gather = staticmethod(jax.lax.all_gather)
    all_to_all = staticmethod(jax.lax.all_to_all)
    ppermute = staticmethod(jax.lax.ppermute)

    @staticmethod
    def psum_scatter(v, axis_name, *, scatter_dimension=0, tiled=False):
        """jax.lax.psum_scatter; across processes on CPU, psum_then_block instead: XLA:CPU's
        reduce-scatter over gloo intermittently returns wrong values on rank 0
        (jax-ml/jax#40830; seen here on 2 processes x 1 device, 4 KiB float32 blocks)."""
        if jax.process_count() == 1 or jax.devices()[0].platform != "cpu":
            return jax.lax.psum_scatter(v, axis_name, scatter_dimension=scatter_dimension, tiled=tiled)
        return psum_then_block(v, axis_name, scatter_dimension=scatter_dimension, tiled=tiled)

    @staticmethod
    def reduce(v, op, axis):
        if op == "sum":
            return jax.lax.psum(v, axis)
        if op == "max":
            return jax.lax.pmax(v, axis)
        if op == "min":
            return jax.lax.pmin(v, axis)
        return jnp.prod(jax.lax.all_gather(v, axis), axis=0).astype(v.dtype)

    @staticmethod
    def reduce_scatter(v, op, axis_name):
        """A tiled reduce-scatter of max, min or prod (jax.lax has psum_scatter only): the
        reduction, then this device's block of it."""
        return reduce_then_block(Lax.reduce(v, op, axis_name), axis_name, tiled=True)


def psum_then_block(v, axis_name, *, scatter_dimension=0, tiled=False):
    """psum_scatter's result by its definition: the sum over the axis, then this device's block
    of it (tests/in_process/test_vs_lax.py checks it against jax.lax.psum_scatter in one process)."""
    return reduce_then_block(jax.lax.psum(v, axis_name), axis_name,
                             scatter_dimension=scatter_dimension, tiled=tiled)


def reduce_then_block(total, axis_name, *, scatter_dimension=0, tiled=False):
    """This device's block of `total` (the whole reduction over `axis_name`)."""
    index = jax.lax.axis_index(axis_name)
    if not tiled:
        return jax.lax.dynamic_index_in_dim(total, index, axis=scatter_dimension, keepdims=False)
    size = total.shape[scatter_dimension] // jax.lax.psum(1, axis_name)
    return jax.lax.dynamic_slice_in_dim(total, index * size, size, axis=scatter_dimension)


def reductions(dtype, size):
    if np.dtype(dtype) == np.bool_:
        return ("max", "min")
    if np.issubdtype(np.dtype(dtype), np.complexfloating):
        return ("sum",)
    return ("sum", "max", "min") + (("prod",) if size <= 64 else ())  # products stay exact


def rolled(v, n):
    """[n, *v.shape]: a different block for every destination."""
    return jnp.stack([jnp.roll(v, i) if v.size else v for i in range(n)])


def every_collective(impl, v, dtype, n=N_DEFAULT, axis="x"):
    out = {}
    for op in reductions(dtype, v.size):
        out[f"all_reduce/{op}"] = impl.reduce(v, op, axis)
    blocks = rolled(v, n)
    if np.dtype(dtype) != np.bool_:
        out["reduce_scatter/untiled"] = impl.psum_scatter(blocks, axis)
        tiled = blocks.reshape((-1,) + v.shape[1:])
        out["reduce_scatter/tiled"] = impl.psum_scatter(tiled, axis, tiled=True)
        for op in reductions(dtype, v.size):
            if op != "sum":
                out[f"reduce_scatter/{op}"] = impl.reduce_scatter(tiled, op, axis)
        if v.ndim == 2:
            wide = jnp.concatenate(list(blocks), axis=1)
            out["reduce_scatter/dim1"] = impl.psum_scatter(wide, axis, scatter_dimension=1,
                                                           tiled=True)
    out["all_gather/untiled"] = impl.all_gather(v, axis)
    out["all_gather/tiled"] = impl.all_gather(v, axis, tiled=True)
    if v.ndim == 2:
        out["all_gather/axis1"] = impl.all_gather(v, axis, axis=1, tiled=True)
        out["all_to_all/1->0"] = impl.all_to_all(v, axis, 1, 0, tiled=True)
    out["all_to_all/untiled"] = impl.all_to_all(blocks, axis, 0, 0)
    if v.shape[0] % n == 0:
        out["all_to_all/tiled"] = impl.all_to_all(v, axis, 0, 0, tiled=True)
    out["ppermute/shift"] = impl.ppermute(v, axis, [(i, (i + 1) % n) for i in range(n)])
    out["ppermute/partial"] = impl.ppermute(v, axis, [(0, n - 1)] + [(i, i - 1) for i in
                                                                     range(2, n)])
    return out
