"""jaccl.ragged_all_to_all against a numpy model of jax.lax.ragged_all_to_all's documented
semantics (XLA:CPU cannot run jax.lax's), one process x 4 devices, on both schedules of one
process (members reading each other's buffers, and frames through the engine): random valid
arguments, one and two slices per pair, int32 and int64 indices, rows of several shapes and
dtypes, `output` kept where nothing arrives; autodiff (the transpose element by element
against a numpy adjoint, and <f(x), t> == <x, f^T(t)>); vmap of the op; bad arguments at trace time and at run
time (every rank of the group raises, naming the entry)."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_jaccl as jaccl
from jax_jaccl import _settings
import ragged_model

from util import N, dtype_id, mesh1d, put

SCHEDULES = ["direct", "frames"]


@contextlib.contextmanager
def schedule(name):
    if name == "frames":  # the engine's streams, also inside one process (JACCL_ALGO=mesh)
        with _settings.override(algorithm="mesh"):
            yield
    else:
        yield


def run(fn, per_device_args, n_out=1):
    """fn(*local args) in shard_map over "x"; per_device_args: lists of per-device arrays."""
    stacked = [put(np.concatenate([a[None] for a in arg]).reshape((-1,) + arg[0].shape[1:])
                   if arg[0].ndim else np.stack(arg), mesh1d())
               for arg in per_device_args]
    f = jax.jit(jax.shard_map(fn, mesh=mesh1d(), in_specs=(P("x"),) * len(stacked),
                              out_specs=P("x")))
    out = np.asarray(f(*stacked))
    return np.split(out, N)


def as_local(fn):
    """Per-device index arrays arrive as [1, K] blocks of [N, K]: drop the leading 1."""
    def local(operand, output, *indices):
        return fn(operand, output, *(i.reshape(-1) for i in indices))
    return local


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("row_shape, dtype", [((), np.float32), ((3,), np.int32),
                                              ((2, 5), jnp.bfloat16), ((4,), np.complex64),
                                              ((3,), np.uint8)],
                         ids=lambda v: dtype_id(v) if not isinstance(v, tuple) else
                         "x".join(map(str, v)) or "rows")
def test_matches_the_model(name, k, row_shape, dtype):
    rng = np.random.default_rng(k * 7 + len(row_shape))
    args = ragged_model.random_arguments(rng, N, k, in_rows=24, out_rows=40, row_shape=row_shape,
                                         dtype=np.float32)
    operands, outputs, in_off, sizes, out_off, recv = args
    operands = [o.astype(dtype) for o in operands]
    outputs = [o.astype(dtype) for o in outputs]
    if dtype == np.complex64:
        operands = [o * (1 - 2j) for o in operands]
    want = ragged_model.ragged_all_to_all(operands, outputs, in_off, sizes, out_off, recv)
    with schedule(name):
        got = run(as_local(lambda *a: jaccl.ragged_all_to_all(*a, axis_name="x")),
                  [operands, outputs, list(in_off.astype(np.int32)), list(sizes.astype(np.int32)),
                   list(out_off.astype(np.int32)), list(recv.astype(np.int32))])
    for d in range(N):
        np.testing.assert_array_equal(np.asarray(got[d]).astype(np.float64) if dtype == jnp.bfloat16
                                      else got[d], np.asarray(want[d]).astype(np.float64)
                                      if dtype == jnp.bfloat16 else want[d], err_msg=f"device {d}")


def test_int64_indices_and_the_lax_names():
    rng = np.random.default_rng(3)
    with jax.enable_x64(True):
        args = ragged_model.random_arguments(rng, N, 1, in_rows=16, out_rows=20, row_shape=(2,),
                                             dtype=np.float64)
        want = ragged_model.ragged_all_to_all(*args)
        got = run(as_local(lambda *a: jaccl.lax.ragged_all_to_all(*a, axis_name="x")),
                  [args[0], args[1]] + [list(v) for v in args[2:]])
    for d in range(N):
        np.testing.assert_array_equal(got[d], want[d])


@pytest.mark.parametrize("name", SCHEDULES)
def test_axis_index_groups_against_the_model_of_each_group(name):
    """Groups [[3, 0], [1, 2]]: each group exchanges among itself, member order as given (the
    model runs on each group's arguments in that order)."""
    groups = [[3, 0], [1, 2]]
    rng = np.random.default_rng(5)
    per_device, want = [None] * N, [None] * N
    for group in groups:
        args = ragged_model.random_arguments(rng, len(group), 2, in_rows=10, out_rows=16,
                                             row_shape=(3,))
        results = ragged_model.ragged_all_to_all(*args)
        for rank, d in enumerate(group):
            per_device[d] = [a[rank] for a in args]
            want[d] = results[rank]
    columns = [list(c) for c in zip(*per_device)]
    columns[2:] = [[np.asarray(v, np.int32) for v in c] for c in columns[2:]]
    with schedule(name):
        got = run(as_local(lambda *a: jaccl.ragged_all_to_all(*a, axis_name="x",
                                                              axis_index_groups=groups)), columns)
    for d in range(N):
        np.testing.assert_array_equal(got[d], want[d], err_msg=f"device {d}")


def test_the_transpose_is_the_adjoint_and_jvp_is_the_op():
    """ragged_all_to_all is linear in (operand, output): (dx, dy) = f^T(t) is numpy's adjoint
    element by element (so <f(x, y), t> == <x, dx> + <y, dy>), and jvp(f) at any point is f of
    the tangents."""
    rng = np.random.default_rng(11)
    operands, outputs, in_off, sizes, out_off, recv = ragged_model.random_arguments(
        rng, N, 2, in_rows=12, out_rows=20, row_shape=(3,))
    t = [rng.normal(size=o.shape).astype(np.float32) for o in outputs]
    indices = [put(np.asarray(v, np.int32).reshape(-1), mesh1d()) for v in (in_off, sizes, out_off,
                                                                           recv)]
    x = put(np.concatenate(operands), mesh1d())
    y = put(np.concatenate(outputs), mesh1d())
    tt = put(np.concatenate(t), mesh1d())

    def f(x, y, *idx):
        return jax.shard_map(lambda *a: jaccl.ragged_all_to_all(*a, axis_name="x"), mesh=mesh1d(),
                             in_specs=(P("x"),) * 6, out_specs=P("x"))(x, y, *idx)

    out, vjp = jax.vjp(lambda x, y: f(x, y, *indices), x, y)
    dx, dy = jax.jit(vjp)(tt)
    want_dx, want_dy = ragged_model.transpose(t, 12, in_off, sizes, out_off)
    np.testing.assert_array_equal(np.asarray(dx), np.concatenate(want_dx))  # element by element
    np.testing.assert_array_equal(np.asarray(dy), np.concatenate(want_dy))
    assert np.abs(np.asarray(dx)).sum() > 0
    a = lambda v: np.asarray(v, np.float64).ravel()  # noqa: E731
    lhs = float(np.dot(a(out), a(tt)))
    rhs = float(np.dot(a(x), a(dx)) + np.dot(a(y), a(dy)))
    assert abs(lhs - rhs) <= 1e-3 * max(1.0, abs(lhs)), (lhs, rhs)  # the adjoint's definition
    _, tangent = jax.jvp(lambda x, y: f(x, y, *indices), (x, y), (x, y))
    np.testing.assert_array_equal(np.asarray(tangent), np.asarray(out))


def test_vmap_of_the_op_over_a_batch():
    rng = np.random.default_rng(5)
    batches = [ragged_model.random_arguments(rng, N, 1, in_rows=8, out_rows=12) for _ in range(3)]
    want = [ragged_model.ragged_all_to_all(*b) for b in batches]
    stack = lambda i: [np.stack([b[i][d] for b in batches]) for d in range(N)]  # noqa: E731
    per_device = [stack(0), stack(1)] + [[np.stack([np.asarray(b[i][d], np.int32) for b in batches])
                                          for d in range(N)] for i in (2, 3, 4, 5)]
    args = [put(np.concatenate(a), mesh1d()) for a in per_device]

    def local(operand, output, *idx):
        return jax.vmap(lambda *a: jaccl.ragged_all_to_all(*a, axis_name="x"))(operand, output, *idx)

    # every device holds [3, rows] blocks: shard over the batch-major leading axis per device
    f = jax.jit(jax.shard_map(local, mesh=mesh1d(), in_specs=(P("x"),) * 6, out_specs=P("x")))
    got = np.split(np.asarray(f(*args)), N)
    for d in range(N):
        for b in range(3):
            np.testing.assert_array_equal(got[d][b], want[b][d], err_msg=f"device {d} batch {b}")


@pytest.mark.parametrize("call, match", [
    (lambda o, y, a, b, c, d: jaccl.ragged_all_to_all(o, y[:, None], a, b, c, d, axis_name="x"),
     "same shape but for the leading dimension"),
    (lambda o, y, a, b, c, d: jaccl.ragged_all_to_all(o, y, a[:3], b, c, d, axis_name="x"),
     "same length, a multiple of the group size 4"),
    (lambda o, y, a, b, c, d: jaccl.ragged_all_to_all(o, y, a.astype(jnp.float32), b, c, d,
                                                      axis_name="x"),
     "input_offsets must be integer type"),
    (lambda o, y, a, b, c, d: jaccl.ragged_all_to_all(o, y, a[None], b, c, d, axis_name="x"),
     "must be rank 1"),
    (lambda o, y, a, b, c, d: jaccl.ragged_all_to_all(o[0], y, a, b, c, d, axis_name="x"),
     "need a leading"),
])
def test_trace_time_errors(call, match):
    def local(o, y, *idx):
        return call(o, y, *(i.reshape(-1) for i in idx))
    f = jax.jit(jax.shard_map(local, mesh=mesh1d(), in_specs=(P("x"),) * 6, out_specs=P("x")))
    with pytest.raises(ValueError, match=match):
        f.lower(*[put(np.zeros((N * 6,), np.float32), mesh1d())] * 2,
                *[put(np.zeros((N, N), np.int32), mesh1d())] * 4)


@pytest.mark.parametrize("name", SCHEDULES)
def test_an_output_of_zeros_made_in_the_program(name):
    """output = jnp.zeros(...) inside the program: the lowering leaves it out and the engine
    zeroes only the rows nothing arrives at, releasing whole pages of them to the kernel
    (they read as zeros) when the gap is large. Three calls, so that the fresh outputs reuse
    memory that held earlier results: every row must still be a received row or zero."""
    rng = np.random.default_rng(13)
    rows, width = 8192, 64  # 2 MiB of float32 rows per device: gaps of whole pages
    with schedule(name):
        for call in range(3):
            operands, _, in_off, sizes, out_off, recv = ragged_model.random_arguments(
                rng, N, 1, in_rows=64, out_rows=rows, row_shape=(width,), fill=1.0)
            operands = [o + 7 * (call + 1) for o in operands]  # no row of zeros sent
            zeros = [np.zeros((rows, width), np.float32)] * N
            want = ragged_model.ragged_all_to_all(operands, zeros, in_off, sizes, out_off, recv)

            def local(operand, *idx):
                return jaccl.ragged_all_to_all(operand, jnp.zeros((rows, width), jnp.float32),
                                               *(i.reshape(-1) for i in idx), axis_name="x")

            f = jax.jit(jax.shard_map(local, mesh=mesh1d(), in_specs=(P("x"),) * 5,
                                      out_specs=P("x")))
            assert "into_zeros" in f.lower(
                put(np.concatenate(operands), mesh1d()),
                *[put(np.asarray(v, np.int32).reshape(-1), mesh1d()) for v in (in_off, sizes, out_off, recv)]
            ).as_text()
            got = np.split(np.asarray(f(put(np.concatenate(operands), mesh1d()),
                                        *[put(np.asarray(v, np.int32).reshape(-1), mesh1d())
                                          for v in (in_off, sizes, out_off, recv)])), N)
            for d in range(N):
                np.testing.assert_array_equal(got[d], want[d], err_msg=f"call {call} device {d}")
