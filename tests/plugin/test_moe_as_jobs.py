"""MoE dispatch and combine across processes and emulated hosts, as pytest-plugin jobs: every case
of tests/support/moe_cases.py against the jax.numpy reference (tests/support/moe_reference.py) in
the same job, bitwise on every device of every process, for float32, bfloat16 and float16 (float32
alone between hosts); FP8 dispatch in every scale format (one between hosts) against the reference's
rows quantised in numpy; dropless dispatch and combine against the reference with room for every
row; gradients of dispatch-expert-combine against the reference's, also in a shard_map manual over
the expert axis only, and combine streams longer than the rings they pass through (within the host).
Layouts: 2 processes x 2 devices on one host; 2 hosts x 2 processes on loopback over jaccl's TCP and
in network namespaces (as root) over the OFI transport; the arrival schedule on one host (2 frames
of 4 KiB in flight) and between hosts. Between hosts the live ranks also serve without a lost one
(lost_ranks; capacity, dropless and FP8) against the reference on the masked whole layout."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jax_jaccl as jaccl
from jax_jaccl import _ext
from job_layouts import OFI, SMALL_FRAMES, expected, layout, needs_ofi
import moe_reference as ref
import fp8_reference as fref
from moe_cases import (CASES, FP8_CASE, FP8_FORMATS, WIDE_CASES, dropless_dispatches, expert,
                       fp8_dispatches, fp8_inputs, inputs, packed, routing,
                       tanh_expert_round_trips)
from util import N, assert_equal


class Checks:
    """The job's mesh over every device, and comparisons of every device's shard."""

    def __init__(self):
        self.n = jax.device_count()
        self.mesh = jax.make_mesh((self.n,), ("x",))
        self.checked = []

    def put(self, a):
        return jax.make_array_from_callback(a.shape, NamedSharding(self.mesh, P("x")), lambda i: a[i])

    def smap(self, fn, n_in, n_out):
        return jax.jit(jax.shard_map(fn, mesh=self.mesh, in_specs=(P("x"),) * n_in,
                                     out_specs=(P("x"),) * n_out))

    def assert_same(self, name, a, b, **close):
        """Bitwise (-0 is not +0), or within `close` (assert_allclose's rtol, atol)."""
        local = lambda arr: {s.device.id: np.asarray(s.data) for s in arr.addressable_shards}  # noqa: E731
        la, lb = local(a), local(b)
        assert la.keys() == lb.keys() and la
        for dev in la:
            if close:
                np.testing.assert_allclose(la[dev].astype(np.float32), lb[dev].astype(np.float32),
                                           err_msg=f"{name} on device {dev}", **close)
            else:
                assert_equal(la[dev], lb[dev], err_msg=f"{name} on device {dev}")
        self.checked.append(name)


ROW_DTYPES = (np.float32, jnp.bfloat16, np.float16)  # every dtype MoE rows take


def check_every_case(c: Checks, dtypes=ROW_DTYPES, cases=CASES) -> None:
    """Each case of `cases` whose experts split over the job's devices, in `dtypes`."""
    for case, (T, H, K, E, C, kind) in cases.items():
        if E % c.n:
            continue
        for dtype in dtypes:
            rng = np.random.default_rng(0)
            x = (rng.integers(-64, 64, size=(c.n * T, H)) / 16).astype(dtype)
            x[x == 0] = -0.0  # moved rows keep their bits
            idx = np.concatenate([routing(kind, T, K, E, r) for r in range(c.n)])
            w = rng.random(size=(c.n * T, K)).astype(np.float32)

            def ours(x, i, w):
                recv, cnt, h = jaccl.moe_dispatch(x, i, w, num_experts=E, capacity=C, axis_name="x")
                return recv[None], cnt[None], jaccl.moe_combine(expert(recv), h, w, axis_name="x")[None]

            def theirs(x, i, w):
                recv, cnt, _ = ref.dispatch(x, i, num_experts=E, capacity=C, axis="x")
                products, ok = ref.pair_products(expert(recv), i, w, num_experts=E, capacity=C, axis="x")
                return recv[None], cnt[None], products, ok

            a = c.put(x), c.put(idx), c.put(w)
            recv, cnt, out = c.smap(ours, 3, 3)(*a)
            f_recv, f_cnt, products, ok = c.smap(theirs, 3, 4)(*a)
            want = jax.jit(ref.accumulate, static_argnums=2)(products, ok, x.dtype)
            name = f"{case}/{np.dtype(dtype).name}"
            c.assert_same(name + "/recv_x", recv, f_recv)
            c.assert_same(name + "/recv_count", cnt, f_cnt)
            c.assert_same(name + "/combine", out, want.reshape(out.shape))


def check_fp8(c: Checks, formats=FP8_FORMATS) -> None:
    """FP8 dispatch in each scale format of `formats`, on every device of every process: values
    and scales bitwise against the reference dispatch's rows quantised in numpy."""
    if FP8_CASE[3] % c.n:  # its experts must split over the devices
        return
    for scale_format in formats:
        ours, theirs = fp8_dispatches(scale_format)
        a = [c.put(v) for v in fp8_inputs(c.n)]
        values, scales, cnt = c.smap(ours, 3, 3)(*a)
        rows, f_cnt = c.smap(theirs, 3, 2)(*a)
        shards = lambda arr: {s.device.id: np.asarray(s.data) for s in arr.addressable_shards}  # noqa: E731
        got_values, got_scales, counts = shards(values), shards(scales), shards(cnt)
        assert got_values and np.dtype(values.dtype) == jnp.float8_e4m3fn
        for dev, block in shards(rows).items():
            want_values, want_scales = fref.expected_dispatch(block, counts[dev], scale_format)
            np.testing.assert_array_equal(counts[dev], shards(f_cnt)[dev])
            np.testing.assert_array_equal(got_values[dev].view(np.uint8), want_values.view(np.uint8),
                                          err_msg=f"fp8/{scale_format} values on device {dev}")
            np.testing.assert_array_equal(got_scales[dev], want_scales,
                                          err_msg=f"fp8/{scale_format} scales on device {dev}")
        c.checked.append(f"fp8/{scale_format}")


def check_dropless(c: Checks, cases=("random", "k8-eloc4")) -> None:
    """Dropless dispatch and combine, float32, on every device of every process: recv_x
    bitwise against the reference's rows packed by group, combine bitwise."""
    for case in cases:
        T, H, K, E, C, kind = CASES[case]
        if E % c.n:
            continue
        rng = np.random.default_rng(1)
        x = (rng.integers(-64, 64, size=(c.n * T, H)) / 16).astype(np.float32)
        idx = np.concatenate([routing(kind, T, K, E, r) for r in range(c.n)])
        w = rng.random(size=(c.n * T, K)).astype(np.float32)
        ours, theirs = dropless_dispatches(case)
        a = c.put(x), c.put(idx), c.put(w)
        wrap = lambda fn: lambda *v: tuple(r[None] for r in fn(*v))  # noqa: E731
        recv, cnt, dropped, out = c.smap(wrap(ours), 3, 4)(*a)
        f_recv, f_cnt, f_dropped, products, ok = c.smap(wrap(theirs), 3, 5)(*a)
        merge = lambda p, o: ref.accumulate(p.reshape((-1,) + p.shape[2:]),  # noqa: E731
                                            o.reshape((-1,) + o.shape[2:]), x.dtype)
        want = jax.jit(merge)(products, ok)
        shards = lambda arr: {s.device.id: np.asarray(s.data)[0] for s in arr.addressable_shards}  # noqa: E731
        got, counts, f_counts, rows = shards(recv), shards(cnt), shards(f_cnt), shards(f_recv)
        drops = (*shards(dropped).values(), *shards(f_dropped).values())
        assert got and not any(d.any() for d in drops)
        for dev in got:
            np.testing.assert_array_equal(counts[dev], f_counts[dev])
            np.testing.assert_array_equal(got[dev], packed(rows[dev], counts[dev], T * K * c.n),
                                          err_msg=f"dropless/{case} recv_x on device {dev}")
        c.assert_same(f"dropless/{case}/combine", out, want.reshape(out.shape))


def check_gradients(c: Checks) -> None:
    """d/dx and d/dw of sum(combine(tanh(dispatch(x))) ** 2) against the reference's."""
    T, H, K, E, C, _ = CASES["random"]
    rng = np.random.default_rng(5)
    x = rng.normal(size=(c.n * T, H)).astype(np.float32)
    idx = np.concatenate([routing("random", T, K, E, 10 + r) for r in range(c.n)])
    w = rng.random(size=(c.n * T, K)).astype(np.float32)

    def grads(dispatch_combine):
        def f(x, w, i):
            out = jax.shard_map(dispatch_combine, mesh=c.mesh, in_specs=(P("x"),) * 3, out_specs=P("x"))(x, i, w)
            return jnp.sum(out * out)
        return jax.jit(jax.grad(f, argnums=(0, 1)))(c.put(x), c.put(w), c.put(idx))

    ours, theirs = tanh_expert_round_trips(E, C)
    for name, a, b in zip(("dx", "dw"), grads(ours), grads(theirs)):
        c.assert_same(f"grad/{name}", a, b, rtol=1e-5, atol=1e-6)


def check_partly_manual_layer(c: Checks) -> None:
    """An expert-parallel layer as models write it: a ("data", "x") mesh, the shard_map manual
    over the expert axis "x" only; values and gradients against the dense reference."""
    if c.n % 2 or c.n < 4:
        return
    auto = (jax.sharding.AxisType.Auto,) * 2
    mesh = jax.make_mesh((c.n // 2, 2), ("data", "x"), axis_types=auto)
    T, H, K, E, C = 8, 8, 2, 4, 10
    rng = np.random.default_rng(8)
    x = (rng.integers(-64, 64, size=(2 * T, H)) / 16).astype(np.float32)
    idx = np.concatenate([routing("random", T, K, E, seed=r) for r in range(2)])
    w = rng.random(size=(2 * T, K)).astype(np.float32)
    ours, theirs = tanh_expert_round_trips(E, C)
    sharding = NamedSharding(mesh, P("x"))
    args = [jax.make_array_from_callback(a.shape, sharding, lambda i, a=a: a[i]) for a in (x, w, idx)]

    def value_and_grads(layer):
        def f(x, w, i):
            out = jax.shard_map(layer, mesh=mesh, in_specs=(P("x"),) * 3, out_specs=P("x"),
                                axis_names={"x"})(x, i, w)
            return jnp.sum(out * out), out
        g = jax.jit(jax.value_and_grad(f, argnums=(0, 1), has_aux=True),
                    out_shardings=((None, sharding), (sharding, sharding)))
        (_, out), (dx, dw) = g(*args)
        return out, dx, dw

    # The gradients sum terms of up to ~1 that cancel (a dx of 0.0087 differed by 1.2e-6 when
    # XLA compiled without LLVM's optimisations): float32 rounding of the values' scale.
    for name, a, b in zip(("out", "dx", "dw"), value_and_grads(ours), value_and_grads(theirs)):
        c.assert_same(f"partly-manual/{name}", a, b, rtol=1e-5, atol=1e-5)


def check_lost_ranks(c: Checks, lost=(2,)) -> None:
    """Serving without a lost rank across processes: the live ranks (one a process, those
    not lost) run moe_dispatch(..., lost_ranks=lost) and combine on a mesh of their devices,
    the lost rank's process stays out; each compares its own device's recv_x, recv_count,
    dropped and combine (capacity, dropless, FP8) with the reference (moe_reference.py) that the
    whole layout computes with the lost rank's pairs masked and nothing routed by it."""
    assert c.n == N == jax.process_count(), "one device a process, as moe_cases.inputs lays out"
    devices = jax.devices()
    live = [r for r in range(c.n) if r not in lost]
    mine = devices.index(jax.local_devices()[0])
    put = lambda mesh, a: jax.make_array_from_callback(  # noqa: E731
        a.shape, NamedSharding(mesh, P("x")), lambda i: a[i])
    local = lambda arr: np.asarray(arr.addressable_shards[0].data)  # noqa: E731
    whole, alive = Mesh(np.array(devices), ("x",)), Mesh(np.array([devices[r] for r in live]), ("x",))
    smap = lambda mesh, fn, n_in, n_out: jax.jit(jax.shard_map(  # noqa: E731
        fn, mesh=mesh, in_specs=(P("x"),) * n_in, out_specs=(P("x"),) * n_out))
    for layout in ("capacity", "dropless", "fp8"):
        x, idx, w, E, C = inputs("k8-eloc4" if layout == "capacity" else "random", np.float32, 5)
        if layout == "fp8":
            x = np.repeat(x, 32, axis=1)  # H = 256: two scale blocks
        T = x.shape[0] // c.n
        room = T * c.n if layout == "dropless" else C
        options = {"capacity": dict(capacity=C), "dropless": dict(dropless=True),
                   "fp8": dict(capacity=C, fp8=True)}[layout]
        per_rank = E // c.n
        masked = np.where(np.isin(idx // per_rank, lost) & (idx >= 0), -1, idx)
        masked = np.concatenate([np.full_like(b, -1) if r in lost else b
                                 for r, b in enumerate(np.split(masked, c.n))])

        def theirs(x, i, w):
            recv, count, dropped = ref.dispatch(x, i, num_experts=E, capacity=room, axis="x")
            products, ok = ref.pair_products(expert(recv), i, w, num_experts=E, capacity=room,
                                             axis="x")
            return recv[None], count[None], dropped[None], products, ok

        def ours(x, i, w):
            recv, count, handle = jaccl.moe_dispatch(x, i, w, num_experts=E, axis_name="x",
                                                     lost_ranks=lost, **options)
            rows = jaccl.dequantize_fp8(recv) if layout == "fp8" else recv
            out = jaccl.moe_combine(expert(rows), handle, w, axis_name="x")
            values = (recv.values, recv.scales) if layout == "fp8" else (recv, recv)
            return values[0][None], values[1][None], count[None], handle.dropped[None], out

        want = [local(a) for a in smap(whole, theirs, 3, 5)(*(put(whole, a) for a in (x, masked, w)))]
        if mine in lost:
            continue
        rows_of = lambda a: np.concatenate([np.split(a, c.n)[r] for r in live])  # noqa: E731
        got = [local(a) for a in smap(alive, ours, 3, 5)(*(put(alive, rows_of(a)) for a in (x, idx, w)))]
        recv, count, dropped = want[0][0], want[1][0], want[2][0]
        assert_equal(got[2][0], count, err_msg=f"lost/{layout}/recv_count")
        assert_equal(got[3][0], dropped, err_msg=f"lost/{layout}/dropped")
        if layout == "fp8":
            values, scales = fref.expected_dispatch(recv, count, "float32")
            assert_equal(got[0][0].view(np.uint8), values.view(np.uint8), err_msg="lost/fp8/values")
            assert_equal(got[1][0], scales, err_msg="lost/fp8/scales")
        else:
            rows = packed(recv, count, got[0].shape[1]) if layout == "dropless" else recv
            assert_equal(got[0][0], rows, err_msg=f"lost/{layout}/recv_x")
            combined = np.asarray(jax.jit(ref.accumulate, static_argnums=2)(want[3], want[4], x.dtype))
            assert_equal(got[4], combined, err_msg=f"lost/{layout}/combine")
        c.checked.append(f"lost/{layout}")
    assert mine in lost or [n for n in c.checked if n.startswith("lost/")] == [
        "lost/capacity", "lost/dropless", "lost/fp8"]


# Within a host (2x2); between emulated hosts over jaccl's TCP (loopback) and over libfabric
# in network namespaces (the remote-first schedule has other hosts to send to first). Those two
# are there for the schedule and the transports, which move float32 and bfloat16 rows alike,
# and FP8 rows the same in every scale format (the scales are computed before the rows leave):
# float32, one scale format and one dropless case there; every dtype, format and case, and the
# partly manual layer (a question of partitioning, not of transport), within the host.
# The arrival schedule (JACCL_MOE_SCHEDULE=arrival: each rank sends as its rows are ready),
# whose early sends matter only between processes, runs on one host with the flow control at
# its tightest (shared-memory channels of 2 frames of 4 KiB) and between emulated hosts.
ARRIVAL = {"JACCL_MOE_SCHEDULE": "arrival"}


@pytest.mark.parametrize("nprocs, devices, hosts, transport", [
    layout(2, 2), layout(4, 1, 2), layout(4, 1, 2, OFI, network="namespaces", marks=needs_ofi),
    layout(2, 2, settings={**ARRIVAL, **SMALL_FRAMES}, tag="arrival-small-frames"),
    layout(4, 1, 2, settings=ARRIVAL, tag="arrival"),
])
def test_moe_matches_reference(jax_job, request, nprocs, devices, hosts, transport):
    assert (jax_job.process_count, jax_job.local_device_count) == (nprocs, devices)
    assert jaccl.init().host_count == hosts
    assert jaccl.init().transport == (expected(transport) if hosts > 1 else "none")
    arrival = "-arrival" in request.node.callspec.id
    assert jaccl.init().settings.moe_schedule == ("arrival" if arrival else "remote_first")
    c = Checks()
    dtypes = (np.float32,) if hosts > 1 or arrival else ROW_DTYPES
    check_every_case(c, dtypes)
    cases = sum(1 for (_, _, _, E, _, _) in CASES.values() if E % c.n == 0)
    assert len(c.checked) == 3 * len(dtypes) * cases > 0
    if hosts > 1 or arrival:
        if nprocs == 4 and not arrival:
            check_lost_ranks(c)
        check_fp8(c, formats=FP8_FORMATS[:1])
        check_dropless(c, cases=("k8-eloc4",))
        check_gradients(c)
        return
    check_fp8(c)
    check_dropless(c)
    check_gradients(c)
    check_partly_manual_layer(c)
    check_rings(c)


def check_rings(c: Checks) -> None:
    """Within a host each other rank's rows reach the combine through a ring of rows that the
    sum empties token by token (xla_ffi/moe/moe.cc, RowRings): streams that wrap their rings,
    between processes and within one, give the reference's bits, and every stream of this
    process's devices went through a ring."""
    before = _ext.engine.moe_streams_through_rings()
    check_every_case(c, cases=WIDE_CASES)
    devices = jax.local_device_count()
    assert _ext.engine.moe_streams_through_rings() - before == \
        devices * (c.n - 1) * len(ROW_DTYPES) * len(WIDE_CASES)
