"""The MoE cases every MoE suite runs (in one process, across processes, on GPUs): token and
expert counts, routings, the expert function, and the round trip whose gradient each checks.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax.sharding import PartitionSpec as P

import jax_jaccl as jaccl
import moe_reference as ref

from util import N, mesh1d

# name: (tokens per rank, hidden, k, experts, capacity, routing)
CASES = {
    "random": (16, 8, 2, 8, 6, "random"),
    "all-to-one-expert": (16, 8, 2, 8, 5, "one"),
    "nothing-routed": (8, 8, 2, 8, 4, "none"),
    "k1": (12, 16, 1, 4, 12, "random"),
    "k8-eloc4": (10, 8, 8, 16, 9, "random"),
    # more rows a token than one pass of the sum reads; rows longer than a dot product's 32 lanes
    "k12": (10, 40, 12, 16, 40, "random"),
    "eloc1": (10, 8, 2, 4, 20, "random"),
}

# Streams longer than the rings a combine takes them through within a host (xla_ffi/moe/moe.cc,
# RowRings: at least 2 MiB of rows, 256 float32 rows of this width), some rows dropped.
WIDE_CASES = {
    "rings": (512, 2048, 8, 16, 900, "random"),
}


def smap(fn, n_in, n_out):
    """fn under jit(shard_map) over the in-process 1-D mesh, every argument and result P("x")."""
    return jax.jit(jax.shard_map(fn, mesh=mesh1d(), in_specs=(P("x"),) * n_in,
                                 out_specs=(P("x"),) * n_out))


def stacked(*arrays):
    """Per-device results with a leading device axis (for smap's out_specs)."""
    return tuple(a[None] for a in arrays)


def routing(kind, tokens, k, experts, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "none":
        return np.full((tokens, k), -1, np.int32)
    if kind == "one":
        idx = np.stack([rng.choice(np.arange(1, experts), size=k, replace=False)
                        for _ in range(tokens)]).astype(np.int32)
        idx[:, 0] = 0
        return idx
    idx = np.stack([rng.choice(experts, size=k, replace=False) for _ in range(tokens)]).astype(np.int32)
    idx[rng.random(idx.shape) < 0.1] = -1  # some pairs not routed
    return idx


def expert(recv_x):
    """What the experts compute: anything elementwise will do for routing tests."""
    return (recv_x.astype(jnp.float32) * 2.0 + 1.0).astype(recv_x.dtype)


def tanh_expert_round_trips(E, C, dropless=False):
    """dispatch, tanh as the expert, combine over axis "x": jaccl's and the reference's (the
    gradient checks of every suite differentiate both). dropless: jaccl's dispatch is, and C is
    the reference's room for every row."""
    def ours(x, i, w):
        layout = dict(dropless=True) if dropless else dict(capacity=C)
        recv, _, handle = jaccl.moe_dispatch(x, i, w, num_experts=E, axis_name="x", **layout)
        return jaccl.moe_combine(jnp.tanh(recv), handle, w, axis_name="x")

    def theirs(x, i, w):
        recv, _, _ = ref.dispatch(x, i, num_experts=E, capacity=C, axis="x")
        products, ok = ref.pair_products(jnp.tanh(recv), i, w, num_experts=E, capacity=C, axis="x")
        return ref.accumulate(products, ok, x.dtype)

    return ours, theirs


def inputs(case, dtype, seed=0):
    T, H, K, E, C, kind = {**CASES, **WIDE_CASES}[case]
    rng = np.random.default_rng(seed)
    x = (rng.integers(-64, 64, size=(N * T, H)) / 16).astype(dtype)
    x[x == 0] = -0.0  # moved rows keep their bits: a -0 must arrive as -0
    idx = np.concatenate([routing(kind, T, K, E, seed + r) for r in range(N)])
    w = rng.random(size=(N * T, K)).astype(np.float32)
    return x, idx, w, E, C




# FP8 dispatch: (tokens per rank, hidden (two scale blocks), k, experts, capacity)
FP8_CASE = (12, 256, 2, 8, 9)
FP8_FORMATS = ("float32", "pow2", "ue8m0")


def fp8_rows(n, dtype=np.float32, seed=0, magnitudes=(-10, 10)):
    """n ranks' rows whose 128-channel blocks differ in magnitude (2 ** magnitudes), one block
    all zero and one 1000 (past e4m3's 448 before scaling)."""
    T, H = FP8_CASE[:2]
    rng = np.random.default_rng(seed)
    magnitude = np.exp2(rng.integers(*magnitudes, size=(n * T, H // 128, 1)))
    x = (rng.normal(size=(n * T, H // 128, 128)) * magnitude).reshape(n * T, H)
    x[0, :128] = 0.0
    x[1, 5] = 1000.0
    return x.astype(dtype)


def fp8_routing(n, seed=0):
    T, _, K, E, _ = FP8_CASE
    idx = np.concatenate([routing("random", T, K, E, seed + r) for r in range(n)])
    w = np.random.default_rng(seed).random(size=(n * T, K)).astype(np.float32)
    return idx, w


def fp8_inputs(n, seed=0):
    """fp8_rows, routing, weights."""
    return (fp8_rows(n, seed=seed),) + fp8_routing(n, seed)


def fp8_dispatches(scale_format, pair=False):
    """jaccl's FP8 dispatch over axis "x" (fp8=True, or pair=True: a pair quantised before)
    -> (values, scales, count), and the reference dispatch of the same rows unquantised ->
    (rows, count): compare with fp8_reference.expected_dispatch per device."""
    _, _, _, E, C = FP8_CASE

    def ours(x, i, w):
        if pair:
            x = tuple(jaccl.quantize_fp8(x, scale_format))
        recv, count, _ = jaccl.moe_dispatch(x, i, w, num_experts=E, capacity=C, axis_name="x",
                                            fp8=not pair, scale_format=scale_format)
        return recv.values, recv.scales, count

    def theirs(x, i, w):
        recv, count, _ = ref.dispatch(x, i, num_experts=E, capacity=C, axis="x")
        return recv, count

    return ours, theirs


def dropless_dispatches(case):
    """Dropless dispatch, expert, combine over axis "x" -> (recv [M, H], recv_count, dropped,
    out), and the reference with room for every row -> (recv [E_loc, room, H], recv_count,
    dropped, products, ok): compare recv with packed(reference recv, recv_count, M) per device,
    out with ref.accumulate(products, ok); both drop nothing."""
    T, H, K, E, C, kind = CASES[case]

    def ours(x, i, w):
        recv, count, handle = jaccl.moe_dispatch(x, i, w, num_experts=E, axis_name="x",
                                                 dropless=True)
        out = jaccl.moe_combine(expert(recv), handle, w, axis_name="x")
        return recv, count, handle.dropped, out

    def theirs(x, i, w):
        room = T * jax.lax.axis_size("x")          # every (rank, token) once per expert
        recv, count, dropped = ref.dispatch(x, i, num_experts=E, capacity=room, axis="x")
        products, ok = ref.pair_products(expert(recv), i, w, num_experts=E, capacity=room, axis="x")
        return recv, count, dropped, products, ok

    return ours, theirs


def packed(rows, counts, m):
    """[E_loc, C, H] rows with counts[j] valid in expert j -> [m, H], the groups back to back
    (the dropless layout)."""
    rows, counts = np.asarray(rows), np.asarray(counts).astype(int)
    out = np.zeros((m,) + rows.shape[2:], rows.dtype)
    at = 0
    for j, n in enumerate(counts):
        out[at:at + n] = rows[j, :n]
        at += n
    return out
