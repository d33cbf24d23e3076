"""The edges where jaccl's reductions could differ from jax.lax's, each pinned here to jax.lax's
bits on XLA:CPU (one process x 4 devices; docs/semantics.md, "At the edges", says the same):
a sum of -0s is +0; of equal values (-0 and +0) pmax and pmin keep the lower rank's (the ring
algorithms, asked for by name, their ring order's); inf - inf, NaN in a sum, complex NaN,
integer wrap-around (also inside pmean), float overflow to inf, subnormals (XLA:CPU flushes
them, and jaccl's reductions run under the same flags); pmax/pmin skip a NaN member (the
others' max; -inf / +inf where every member has one, and in a group of one); float16 sums round
to float16 after every addition in rank order, bfloat16 sums accumulate in float32 and round
once. The collectives that only move elements keep every bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

import jax_jaccl as jaccl
from jax_jaccl import lax as jlax
from jax_jaccl.testing.compile_cache import jaxlib_version

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
    "all subnormal, max": ("pmax", [np.full(3, (k + 1) * 1e-45, f32) for k in range(N)]),
    "all subnormal, min": ("pmin", [np.full(3, (-1) ** k * (k + 1) * 1e-45, f32) for k in range(N)]),
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
# A NaN made on the way (inf - inf: the machine's negative default NaN) meets an operand's NaN
# (numpy's, positive): float32, float64, bfloat16 and complex sums keep the later one's, float16
# sums the earlier one's, as XLA:CPU does (either way round: the NaN first, then inf - inf).
for _dtype in (np.float16, jnp.bfloat16, f32, np.float64, np.complex64):
    _made = [np.full(3, np.inf, _dtype), np.full(3, -np.inf, _dtype)]
    _name = np.dtype(_dtype).name
    SAME_AS_LAX[f"made NaN, then a NaN, {_name}"] = ("psum", _made + [np.full(3, np.nan, _dtype),
                                                                      np.ones(3, _dtype)])
    SAME_AS_LAX[f"a NaN, then a made NaN, {_name}"] = ("psum", [np.full(3, np.nan, _dtype)] + _made
                                                       + [np.ones(3, _dtype)])
    _rows = SAME_AS_LAX[f"made NaN, then a NaN, {_name}"][1]  # resized to N, to scatter
    SAME_AS_LAX[f"made NaN, then a NaN, scattered, {_name}"] = (
        "psum_scatter", [np.resize(row, N) for row in _rows])

# A bfloat16 sum's NaN is the quiet NaN of its sign, without the operand's payload (XLA:CPU's,
# on every jax here). (A float16 sum's keeps the payload on jax 0.12 and not on 0.10; jaccl's
# does not: docs/semantics.md.)
SAME_AS_LAX["a bfloat16 NaN with a payload"] = (
    "psum", [np.array([0x7fc1, 0xffc1, 0x7f81], np.uint16).view(jnp.bfloat16)]
    + [np.ones(3, jnp.bfloat16)] * (N - 1))


@pytest.mark.parametrize("case", SAME_AS_LAX)
def test_the_same_bits_as_jax_lax(case):
    name, rows = SAME_AS_LAX[case]
    program = lambda L, v: getattr(L, name)(v, "x")  # noqa: E731
    with jax.enable_x64(rows[0].dtype == np.float64):  # float64 stays float64
        want = run(jax.lax, program, rows)
        got = run(jlax, program, rows)
    np.testing.assert_array_equal(bits(got), bits(want), err_msg=case)


def nan_rows(where, dtype=f32):
    """Every device's row 0..3 plus its rank, with a NaN at position 1 on the devices `where`."""
    rows = [(np.arange(4) + k).astype(dtype) for k in range(N)]
    for k in where:
        rows[k][1] = np.nan
    return rows


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_keeps_the_signs_of_zeros_and_skips_nans(algorithm):
    """The +0 sum of -0s whichever algorithm runs; the lower rank's zero in max and min where
    the algorithm combines in rank order (the rings combine each block in ring order, so their
    ties follow it)."""
    minus = np.full(5, -0.0, f32)
    plus = np.zeros(5, f32)
    assert not np.signbit(run(None, "sum", [minus] * N, algorithm)).any()
    for op, skip_nan in (("max", np.nanmax), ("min", np.nanmin)):
        rows = nan_rows((1, N - 1))
        assert_equal(run(None, op, rows, algorithm), np.stack([skip_nan(rows, axis=0)] * N))
        ends = -np.inf if op == "max" else np.inf
        assert_equal(run(None, op, nan_rows(range(N)), algorithm)[:, 1], np.full(N, ends, f32))
    if algorithm.startswith("ring"):
        return
    assert np.signbit(run(None, "max", [minus, plus, plus, plus], algorithm)).all()
    assert not np.signbit(run(None, "max", [plus, minus, minus, minus], algorithm)).any()
    assert np.signbit(run(None, "min", [minus, plus, minus, plus], algorithm)).all()


def signalling_nan_rows(dtype):
    """A quiet NaN on device 0 and a signalling NaN (a payload of 3) on the last device: the sum
    meets the signalling one last, as a NaN, and keeps it quieted (the CPU's add; XLA:CPU's)."""
    unsigned, quiet, signalling = ((np.uint32, 0x7fc00005, 0x7f800003) if dtype == f32 else
                                   (np.uint64, 0x7ff8000000000005, 0x7ff0000000000003))
    negative = 1 << (63 if dtype == np.float64 else 31)
    rows = [np.ones(3, dtype) for _ in range(N)]
    rows[0][:2] = np.array([quiet, quiet | negative], unsigned).view(dtype)
    rows[-1] = np.full(3, signalling, unsigned).view(dtype)
    return rows


def sums_checked(rows, algorithm):
    """jax.lax's psum of `rows` and jaccl's (its own choice, or `algorithm`), jaccl's checked:
    jax.lax's bits, or with a ring, which folds each block in ring order, the same bits on every
    rank. Returns both."""
    program = lambda L, v: L.psum(v, "x")  # noqa: E731
    want = run(jax.lax, program, rows)
    got = run(jlax, program, rows) if algorithm is None else run(None, "sum", rows, algorithm)
    if algorithm is None or not algorithm.startswith("ring"):
        np.testing.assert_array_equal(bits(got), bits(want))
    for device in range(1, N):
        np.testing.assert_array_equal(bits(got[device]), bits(got[0]))
    return got, want


@pytest.mark.parametrize("algorithm", [None] + ALGORITHMS)
@pytest.mark.parametrize("dtype", [f32, np.float64])
def test_a_signalling_nan_met_last_comes_out_quieted_on_every_rank(dtype, algorithm):
    """Every rank's result has jax.lax's bits: where the running sum is a NaN the later operand's
    NaN quieted, elsewhere the add's (a signalling NaN kept as it was differed from XLA's, and
    the block's owner kept it while its peers' copies, folded alone, were quieted)."""
    with jax.enable_x64(dtype == np.float64):
        got, _ = sums_checked(signalling_nan_rows(dtype), algorithm)
    assert got.dtype == dtype
    # With a ring, which NaN comes last differs; every NaN is still quiet.
    unsigned, quiet_bit = (np.uint32, 1 << 22) if dtype == f32 else (np.uint64, 1 << 51)
    assert (got.view(unsigned) & quiet_bit).all()


FLUSHED = {  # a sum that underflows on the way: flushed to -0 (XLA:CPU flushes subnormals)
    "flushed, then -0s": (1.4e-38, -1.5e-38, -0.0, -0.0),
    "+0s, then flushed": (0.0, 0.0, 1.4e-38, -1.5e-38),
}


@pytest.mark.parametrize("size", [5, 1 << 19])  # one frame, on XLA's thread; many, on the device's
@pytest.mark.parametrize("algorithm", [None] + ALGORITHMS)
@pytest.mark.parametrize("case", FLUSHED)
def test_a_sum_flushed_to_minus_zero_as_jax_lax(case, algorithm, size):
    """Operands reach the rank that folds them, and results the ranks that store them, as they
    left (they were folded alone on the way: a -0 became +0); the rings, which fold each block
    in ring order, give every rank the same bits."""
    _, want = sums_checked([np.full(size, v, f32) for v in FLUSHED[case]], algorithm)
    assert np.signbit(want).all()


NAN_CASES = {f"NaN on {list(where)}": (where, f32) for where in
             [(0,), (1,), (N - 1,), (0, N - 1), tuple(range(1, N)), tuple(range(N))]}
NAN_CASES["float16 NaN on [2]"] = ((2,), np.float16)
NAN_CASES["bfloat16 NaN on [0]"] = ((0,), jnp.bfloat16)


@pytest.mark.parametrize("op", ["pmax", "pmin"])
@pytest.mark.parametrize("case", NAN_CASES)
def test_max_and_min_skip_a_nan_as_jax_lax(op, case):
    """XLA:CPU's: a NaN member is passed over (the others' max); where every member has a NaN,
    the fold's start, -inf for max and +inf for min."""
    where, dtype = NAN_CASES[case]
    rows = nan_rows(where, dtype)
    program = lambda L, v: getattr(L, op)(v, "x")  # noqa: E731
    want = np.asarray(run(jax.lax, program, rows), f32)[:, 1]
    assert not np.isnan(want).any(), case
    assert np.isinf(want).all() == (len(where) == N), case
    np.testing.assert_array_equal(bits(run(jlax, program, rows)), bits(run(jax.lax, program, rows)),
                                  err_msg=case)


@pytest.mark.parametrize("devices", [N, 1])
@pytest.mark.parametrize("name", ["psum", "pmax", "pmin", "psum_scatter"])
def test_a_group_of_one_as_jax_lax(name, devices):
    """Over an axis of size 1 a reduction is a fold of one operand from the op's identity, as
    jax.lax's: -0 becomes +0 and NaN stays NaN in a sum, NaN becomes -inf / +inf in max / min;
    but in a program of one device XLA:CPU's all-reduce copies its operand, and so does jaccl."""
    grid = Mesh(np.array(jax.devices()[:devices]).reshape(devices, 1), ("x", "y"))
    x = np.stack(nan_rows((0, 2)))[:devices]
    x[-1, 0] = -0.0

    def program(L):
        tiled = {"tiled": True} if name == "psum_scatter" else {}
        body = lambda v: getattr(L, name)(v, "y", **tiled)  # noqa: E731
        return np.asarray(jax.jit(jax.shard_map(body, mesh=grid, in_specs=P("x", "y"),
                                                out_specs=P("x", "y")))(x))
    np.testing.assert_array_equal(bits(program(jlax)), bits(program(jax.lax)))


@pytest.mark.parametrize("algorithm", ["naive", "mesh"])
def test_float16_sums_round_after_every_addition(algorithm):
    """float16 sums add in rank order, each sum rounded to float16 (numpy's float16 adds): the
    bits of jax.lax.psum, which a float32 accumulation rounded once would miss in some rows."""
    rows = [np.random.default_rng(k).normal(size=4096).astype(np.float16) for k in range(N)]
    got = run(None, "sum", rows, algorithm)
    acc = rows[0]
    for row in rows[1:]:
        acc = acc + row
    once = sum(row.astype(f32) for row in rows).astype(np.float16)
    assert np.count_nonzero(bits(acc) != bits(once)), "no row of the sample tells them apart"
    lax = run(jax.lax, lambda L, v: L.psum(v, "x"), rows)
    for device in range(N):
        np.testing.assert_array_equal(bits(got[device]), bits(acc))
        np.testing.assert_array_equal(bits(lax[device]), bits(acc))
    big = [np.full(3, 60000, np.float16), np.full(3, 60000, np.float16),
           np.full(3, -60000, np.float16), np.full(3, 1, np.float16)]
    program = lambda L, v: L.psum(v, "x")  # noqa: E731
    np.testing.assert_array_equal(run(jlax, program, big), run(jax.lax, program, big))
    assert np.isinf(run(jlax, program, big)).all()


def test_bfloat16_sums_agree_with_jax_lax():
    rows = [np.random.default_rng(k).normal(size=4096).astype(jnp.bfloat16) for k in range(N)]
    program = lambda L, v: L.psum(v, "x")  # noqa: E731
    np.testing.assert_array_equal(bits(run(jlax, program, rows)), bits(run(jax.lax, program, rows)))


def checks_of(run_checks):
    """The names of the checks run_checks(compare, n, mesh) (tests/support/process_battery.py)
    ran over this process's devices, each result bitwise equal to its expectation."""
    from process_battery import assert_equal_shards

    checked = []

    def compare(name, got, want, digest=False):
        assert_equal_shards(name, got, want)
        checked.append(name)
    run_checks(compare, N, mesh())
    return checked


def test_copies_keep_every_bit():
    """all_gather, all_to_all, ppermute and ragged_all_to_all carry -0, NaN payloads and a
    signalling NaN unchanged (the same checks run across processes in the battery's jobs)."""
    from process_battery import run_float_edges

    assert len(checks_of(run_float_edges)) == 4 * 5


def test_sums_of_random_values_fold_in_rank_order():
    """all_reduce and reduce_scatter of values whose sums round differently in every order give
    the fold in rank order, bit for bit (the battery's jobs check the same across processes)."""
    from process_battery import run_rank_order_sums

    assert len(checks_of(run_rank_order_sums)) == 3 * 2 * 2


def test_sums_of_edge_values_as_xla():
    """all_reduce and reduce_scatter of NaNs, signalling NaNs, infinities and -0 give XLA:CPU's
    bits on every device (the battery's jobs check the same across processes)."""
    from process_battery import edge_rows, edge_sum, run_edge_sums

    assert len(checks_of(run_edge_sums)) == 2 * 2
    rows = edge_rows(f32, N, 9 * N)  # the model is jax.lax's answer
    for row in run(jax.lax, lambda L, v: L.psum(v, "x"), rows):
        np.testing.assert_array_equal(bits(row), bits(edge_sum(rows)))


@pytest.mark.xfail(jaxlib_version() >= (0, 12, 1), strict=True,
                   reason="known, not yet fixed: on jax 0.12.1 XLA:CPU's float32 "
                   "max and min keep subnormals in arrays of 16 elements or more (and flush them "
                   "in shorter ones), jaccl's flush them always (docs/semantics.md)")
@pytest.mark.parametrize("name", ["pmin", "pmax"])
def test_float32_min_and_max_of_subnormals_in_long_arrays(name):
    """jax 0.10.2 flushes them at every length, as jaccl does."""
    sign = 1 if name == "pmin" else -1
    rows = [np.full(16, sign * v, np.float32) for v in (1e-40, 1.0, 2.0, 3.0)]
    program = lambda L, v: getattr(L, name)(v, "x")  # noqa: E731
    assert_equal(run(jlax, program, rows), run(jax.lax, program, rows))

