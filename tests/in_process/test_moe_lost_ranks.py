"""moe_dispatch(..., lost_ranks=...): MoE serving that goes on without a lost rank, one
process x 4 devices. The live ranks run on a mesh of their devices alone; what they compute
must be what the whole layout computes when every pair routed to a lost rank's experts is
marked -1 and the lost ranks route nothing (their results unread): recv_x, recv_count,
dropped, combine's output and the gradients, bitwise, and handle.lost counts the pairs sent
nowhere. Capacity, dropless and FP8 dispatch; capacity and dropless also against the jax.numpy
reference (independent of jaccl's MoE) on the masked whole layout; trace-time errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jax_jaccl as jaccl
import moe_reference as ref
from moe_cases import expert, inputs, packed

from util import N

LOST = [(1,), (0, 3), (2,)]


def run(fn, devices, args, n_out):
    mesh = Mesh(np.array(devices), ("x",))
    put = lambda a: jax.device_put(a, NamedSharding(mesh, P("x")))  # noqa: E731
    f = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=(P("x"),) * len(args),
                              out_specs=(P("x"),) * n_out))
    return [np.asarray(o, np.float32) for o in f(*map(put, args))]


def split(a, ranks):
    """The rows of `a` ([N * T, ...], rank-major) that belong to `ranks`, in their order."""
    return np.concatenate([np.split(a, N)[r] for r in ranks])


def masked(idx, E, lost):
    """The whole layout's routing that the lost ranks' absence means: pairs to their experts
    -1, and nothing routed by them."""
    per_rank = E // N
    idx = np.where(np.isin(idx // per_rank, lost) & (idx >= 0), -1, idx)
    rows = np.split(idx.copy(), N)
    for r in lost:
        rows[r][:] = -1
    return np.concatenate(rows)


def layer(E, lost, **layout):
    def fn(x, i, w):
        recv, count, handle = jaccl.moe_dispatch(x, i, w, num_experts=E, axis_name="x",
                                                 lost_ranks=lost, **layout)
        values = recv.values.astype(jnp.float32) * recv.scales.repeat(128, -1) if \
            isinstance(recv, jaccl.Fp8Rows) else recv
        out = jaccl.moe_combine(expert(values.astype(x.dtype)), handle, w, axis_name="x")
        return values[None], count[None], handle.dropped[None], out, handle.lost[None]
    return fn


@pytest.mark.parametrize("layout", ["capacity", "dropless", "fp8"])
@pytest.mark.parametrize("lost", LOST, ids=str)
def test_the_live_ranks_compute_what_the_whole_layout_computes_without_the_lost(lost, layout):
    case = "k8-eloc4" if layout == "capacity" else "random"
    x, idx, w, E, C = inputs(case, np.float32, seed=5)
    if layout == "fp8":
        x = np.repeat(x, 32, axis=1)  # H = 256: two scale blocks
    options = {"capacity": dict(capacity=C), "dropless": dict(dropless=True),
               "fp8": dict(capacity=C, fp8=True)}[layout]
    devices = jax.devices()[:N]
    live = [r for r in range(N) if r not in lost]
    whole = run(layer(E, (), **options), devices, (x, masked(idx, E, lost), w), 5)
    ours = run(layer(E, lost, **options), [devices[r] for r in live],
               (split(x, live), split(idx, live), split(w, live)), 5)
    names = ["recv_x", "recv_count", "dropped", "combine"]
    for name, got, want in zip(names, ours, whole):
        want = split(want, live)
        if name == "recv_x" and layout == "dropless":  # M = T * K * ranks: fewer rows here
            want = want[:, :got.shape[1]]
        np.testing.assert_array_equal(got, want, err_msg=name)
    per_rank = E // N
    for member, r in enumerate(live):
        pairs = np.split(idx, N)[r]
        gone = pairs[(pairs >= 0) & np.isin(pairs // per_rank, lost)]
        np.testing.assert_array_equal(ours[4][member], np.bincount(gone, minlength=E))
    assert ours[4].sum() > 0, "the case routes nothing to a lost rank"


@pytest.mark.parametrize("layout", ["capacity", "dropless"])
@pytest.mark.parametrize("lost", LOST, ids=str)
def test_the_live_ranks_match_the_reference(lost, layout):
    """The same against tests/support/moe_reference.py (jax.numpy over all-gathered inputs,
    nothing of jaccl's MoE) on the whole layout with the lost ranks' pairs masked: recv_x
    (dropless: the reference's rows packed by group), recv_count, dropped and combine."""
    case = "k8-eloc4" if layout == "capacity" else "random"
    x, idx, w, E, C = inputs(case, np.float32, seed=5)
    T = x.shape[0] // N
    room = C if layout == "capacity" else T * N  # dropless: every (rank, token) once an expert
    options = dict(capacity=C) if layout == "capacity" else dict(dropless=True)

    def reference(x, i, w):
        recv, count, dropped = ref.dispatch(x, i, num_experts=E, capacity=room, axis="x")
        products, ok = ref.pair_products(expert(recv), i, w, num_experts=E, capacity=room, axis="x")
        return recv[None], count[None], dropped[None], products, ok.astype(jnp.float32)

    devices = jax.devices()[:N]
    live = [r for r in range(N) if r not in lost]
    recv, count, dropped, products, ok = run(reference, devices, (x, masked(idx, E, lost), w), 5)
    combined = np.asarray(ref.accumulate(products, ok > 0, np.float32))  # a program of its own
    ours = run(layer(E, lost, **options), [devices[r] for r in live],
               (split(x, live), split(idx, live), split(w, live)), 5)
    want_recv = split(recv, live)
    if layout == "dropless":
        m = ours[0].shape[1]
        want_recv = np.stack([packed(rows, n, m) for rows, n in zip(want_recv, split(count, live))])
    for name, got, want in zip(["recv_x", "recv_count", "dropped", "combine"], ours,
                               [want_recv, split(count, live), split(dropped, live),
                                split(combined, live)]):
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert split(count, live).sum() > 0


@pytest.mark.parametrize("lost", LOST[:2], ids=str)
def test_gradients_are_the_whole_layouts(lost):
    x, idx, w, E, C = inputs("random", np.float32, seed=6)
    scale = np.random.default_rng(7).normal(size=x.shape).astype(np.float32)

    def grads(mask):
        def f(x, w, i, s):
            def loss(x, w):
                recv, _, handle = jaccl.moe_dispatch(x, i, w, num_experts=E, capacity=C,
                                                     axis_name="x", lost_ranks=mask)
                return jnp.sum(jaccl.moe_combine(jnp.tanh(recv), handle, w, axis_name="x") * s)
            return jax.grad(loss, argnums=(0, 1))(x, w)
        return f

    devices = jax.devices()[:N]
    live = [r for r in range(N) if r not in lost]
    whole = run(grads(()), devices, (x, w, masked(idx, E, lost), scale), 2)
    ours = run(grads(lost), [devices[r] for r in live],
               (split(x, live), split(w, live), split(idx, live), split(scale, live)), 2)
    for name, got, want in zip(["dx", "dw"], ours, whole):
        np.testing.assert_array_equal(got, split(want, live), err_msg=name)


@pytest.mark.parametrize("lost, error, match", [
    ((4,), ValueError, "lost_ranks=\\(4,\\) must be distinct ranks of the layout of 4"),
    ((1, 1), ValueError, "must be distinct ranks"),
    (("a",), TypeError, "lost_ranks must be a tuple of ints"),
    (2, TypeError, "lost_ranks must be a tuple of ints"),
    ((0, 1), ValueError, "num_experts=8 must be a positive multiple of the layout's ranks 5"),
])
def test_trace_time_errors(lost, error, match):
    x, idx, w, E, C = inputs("random", np.float32)
    mesh = Mesh(np.array(jax.devices()[:3]), ("x",))
    f = jax.shard_map(lambda x, i, w: jaccl.moe_dispatch(
        x, i, w, num_experts=E, capacity=C, axis_name="x", lost_ranks=lost)[1][None],
        mesh=mesh, in_specs=(P("x"),) * 3, out_specs=P("x"))
    with pytest.raises(error, match=match):
        jax.jit(f).lower(x[:48], idx[:48], w[:48])
