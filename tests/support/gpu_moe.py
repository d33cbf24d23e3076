"""MoE dispatch and combine on GPUs, run by pytest (test_gpu.py) or in a job's processes
(`tests/workers/gpu.py moe`).

Every case of tests/support/moe_cases.py runs with jaccl on the GPUs of the job and, as the
reference, with the jax.numpy reference implementation (tests/support/moe_reference.py) on as
many CPU devices of this process: recv_x, recv_count and the combine must be bitwise equal,
the gradients close. Prints `OK <checks> ...` at the end. provoke_bad_expert() instead routes a
token to expert 99 and prints `RAISED <message>` (the GPU context is lost after it: run it in a
process of its own, `tests/workers/gpu.py bad-expert`)."""

from __future__ import annotations

import numpy as np


def positions(a) -> dict:
    """{mesh position: that device's block} of an array laid out [n, ...] over the mesh."""
    from util import blocks

    return {position: block[0].astype(np.float32) for position, block in blocks(a).items()}


def on(devices, fn, arrays, n_out):
    """fn under shard_map over `devices` (each output gets a leading device axis)."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(devices), ("x",))
    put = [jax.make_array_from_callback(a.shape, NamedSharding(mesh, P("x")), lambda i, a=a: a[i])
           for a in arrays]
    wrapped = lambda *a: tuple(r[None] for r in fn(*a))  # noqa: E731
    return jax.jit(jax.shard_map(wrapped, mesh=mesh, in_specs=(P("x"),) * len(arrays),
                                 out_specs=(P("x"),) * n_out))(*put), mesh


def reference_layer(E, C):
    """The reference's dispatch, expert and per-pair products (the sums come after, apart)."""
    import moe_reference as ref
    from moe_cases import expert

    def theirs(x, i, w):
        recv, cnt, _ = ref.dispatch(x, i, num_experts=E, capacity=C, axis="x")
        products, ok = ref.pair_products(expert(recv), i, w, num_experts=E, capacity=C, axis="x")
        return recv, cnt, products, ok
    return theirs


def compare(ours, theirs, dtype, shape, name) -> int:
    """recv_x, recv_count and combine of `ours` (on the devices) bitwise against `theirs`
    (reference_layer's outputs, on every rank of the layout); returns the checks made."""
    import jax
    import moe_reference as ref

    (recv, cnt, out), (f_recv, f_cnt, products, ok) = ours, theirs
    # Products and sums in separate programs: XLA would fuse a*b+c into an FMA.
    merge = lambda p, o: ref.accumulate(p.reshape((-1,) + p.shape[2:]),  # noqa: E731
                                        o.reshape((-1,) + o.shape[2:]), dtype)
    want = np.asarray(jax.jit(merge)(products, ok), np.float32).reshape(shape)
    checked = 0
    for label, got, expected in (("recv_x", positions(recv), positions(f_recv)),
                                 ("recv_count", positions(cnt), positions(f_cnt)),
                                 ("combine", positions(out), dict(enumerate(want)))):
        for p, value in got.items():
            np.testing.assert_array_equal(value, expected[p], err_msg=f"{name}/{label} @{p}")
            checked += 1
    return checked


def check_moe(devices=None, reference=None, verbose=True, dtypes=None, slim=False):
    """Every MoE case on `devices` against the reference; `dtypes` (default float32, bfloat16,
    float16) the row types. `slim`: FP8 in one scale format and dropless in one case (a run
    there for where the bytes go, after a full run on the same code)."""
    import jax
    import jax.numpy as jnp

    import jax_jaccl as jaccl
    from moe_cases import CASES, FP8_FORMATS, expert, routing

    devices = devices or jax.devices("gpu")
    n = len(devices)
    reference = reference or jax.local_devices(backend="cpu")[:n]
    assert len(reference) == n, f"need {n} CPU devices for the reference, have {len(reference)}"
    checked = 0
    for case, (T, H, K, E, C, kind) in CASES.items():
        if E % n:
            continue
        for dtype in dtypes or (np.float32, jnp.bfloat16, np.float16):
            rng = np.random.default_rng(0)
            x = (rng.integers(-64, 64, size=(n * T, H)) / 16).astype(dtype)
            idx = np.concatenate([routing(kind, T, K, E, r) for r in range(n)])
            w = rng.random(size=(n * T, K)).astype(np.float32)

            def ours(x, i, w):
                recv, cnt, h = jaccl.moe_dispatch(x, i, w, num_experts=E, capacity=C, axis_name="x")
                return recv, cnt, jaccl.moe_combine(expert(recv), h, w, axis_name="x")

            got, _ = on(devices, ours, (x, idx, w), 3)
            theirs, _ = on(reference, reference_layer(E, C), (x, idx, w), 4)
            checked += compare(got, theirs, x.dtype, (n, T, H),
                               f"{case}/{np.dtype(dtype).name}")
    checked += check_fp8(devices, reference, formats=FP8_FORMATS[:1] if slim else FP8_FORMATS)
    checked += check_dropless(devices, reference,
                              cases=("random",) if slim else ("random", "all-to-one-expert"))
    checked += check_gradients(devices, reference)
    checked += check_lost_rank(devices, reference)
    if verbose:
        print(f"OK {checked} MoE checks on {n} {devices[0].platform} device(s), process "
              f"{jax.process_index()} of {jax.process_count()}", flush=True)
    return checked


def check_fp8(devices, reference, formats):
    """FP8 dispatch in each scale format of `formats`: values and scales bitwise against the
    reference's rows quantised in numpy."""
    import fp8_reference as fref
    from moe_cases import FP8_CASE, fp8_dispatches, fp8_inputs

    checked = 0
    if FP8_CASE[3] % len(devices):  # its experts must split over the devices
        return checked
    for scale_format in formats:
        ours, theirs = fp8_dispatches(scale_format)
        arrays = fp8_inputs(len(devices))
        (values, scales, cnt), _ = on(devices, ours, arrays, 3)
        (rows, f_cnt), _ = on(reference, theirs, arrays, 2)
        got_scales, counts = positions(scales), positions(cnt)
        want_rows, want_counts = positions(rows), positions(f_cnt)
        for p, got in positions(values).items():  # this process's devices
            want_values, want_scales = fref.expected_dispatch(want_rows[p], counts[p], scale_format)
            np.testing.assert_array_equal(counts[p], want_counts[p])
            np.testing.assert_array_equal(got, want_values.astype(np.float32),
                                          err_msg=f"fp8/{scale_format}/values @{p}")
            np.testing.assert_array_equal(got_scales[p], want_scales.astype(np.float32),
                                          err_msg=f"fp8/{scale_format}/scales @{p}")
            checked += 1
    return checked


def check_dropless(devices, reference, cases):
    """Dropless dispatch and combine of each case of `cases`, float32: recv bitwise against
    the reference's rows packed by group, combine bitwise."""
    import jax

    import moe_reference as ref
    from moe_cases import CASES, dropless_dispatches, packed, routing

    checked, n = 0, len(devices)
    for case in cases:
        T, H, K, E, C, kind = CASES[case]
        if E % n:
            continue
        rng = np.random.default_rng(0)
        x = (rng.integers(-64, 64, size=(n * T, H)) / 16).astype(np.float32)
        idx = np.concatenate([routing(kind, T, K, E, r) for r in range(n)])
        w = rng.random(size=(n * T, K)).astype(np.float32)
        ours, theirs = dropless_dispatches(case)
        (recv, cnt, dropped, out), _ = on(devices, ours, (x, idx, w), 4)
        (f_recv, f_cnt, f_dropped, products, ok), _ = on(reference, theirs, (x, idx, w), 5)
        merge = lambda p, o: ref.accumulate(p.reshape((-1,) + p.shape[2:]),  # noqa: E731
                                            o.reshape((-1,) + o.shape[2:]), x.dtype)
        want = np.asarray(jax.jit(merge)(products, ok), np.float32).reshape(n, T, H)
        counts, f_counts, rows = positions(cnt), positions(f_cnt), positions(f_recv)
        for p, got in positions(recv).items():
            np.testing.assert_array_equal(counts[p], f_counts[p], err_msg=f"dropless/{case} @{p}")
            assert not positions(dropped)[p].any() and not positions(f_dropped)[p].any()
            np.testing.assert_array_equal(got, packed(rows[p], counts[p], T * K * n),
                                          err_msg=f"dropless/{case}/recv_x @{p}")
            checked += 1
        for p, got in positions(out).items():
            np.testing.assert_array_equal(got, want[p], err_msg=f"dropless/{case}/combine @{p}")
            checked += 1
    return checked


def check_gradients(devices, reference):
    import jax
    import jax.numpy as jnp

    from moe_cases import CASES, routing, tanh_expert_round_trips
    from util import blocks

    n = len(devices)
    T, H, K, E, C, _ = CASES["random"]
    rng = np.random.default_rng(5)
    x = rng.normal(size=(n * T, H)).astype(np.float32)
    idx = np.concatenate([routing("random", T, K, E, 10 + r) for r in range(n)])
    w = rng.random(size=(n * T, K)).astype(np.float32)

    ours, theirs = tanh_expert_round_trips(E, C)

    def grads(fn, devs):
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        mesh = Mesh(np.array(devs), ("x",))
        put = lambda a: jax.make_array_from_callback(a.shape, NamedSharding(mesh, P("x")),  # noqa: E731
                                                     lambda i: a[i])

        def loss(x, w, i):
            out = jax.shard_map(fn, mesh=mesh, in_specs=(P("x"),) * 3, out_specs=P("x"))(x, i, w)
            return jnp.sum(out * out)

        dx, dw = jax.jit(jax.grad(loss, argnums=(0, 1)))(put(x), put(w), put(idx))
        return [blocks(g) for g in (dx, dw)]

    checked = 0
    for name, got, want in zip(("dx", "dw"), grads(ours, devices), grads(theirs, reference)):
        for start, value in got.items():
            np.testing.assert_allclose(value, want[start], rtol=1e-5, atol=1e-6, err_msg=name)
            checked += 1
    return checked


def check_lost_rank(devices, reference):
    """moe_dispatch(..., lost_ranks=(last,)) on all the devices but the last: recv_x,
    recv_count and the combine bitwise against the reference on every device, the pairs to the
    last one's experts marked -1 and the last routing nothing. In one process (across processes
    the last device's process would hold no device of the mesh)."""
    import jax

    import jax_jaccl as jaccl
    from moe_cases import CASES, expert, routing

    n = len(devices)
    T, H, K, E, C, _ = CASES["random"]
    if n < 2 or E % n or jax.process_count() > 1:
        return 0
    rng = np.random.default_rng(11)
    x = (rng.integers(-64, 64, size=(n * T, H)) / 16).astype(np.float32)
    idx = np.concatenate([routing("random", T, K, E, 20 + r) for r in range(n)])
    w = rng.random(size=(n * T, K)).astype(np.float32)
    gone = np.where((idx // (E // n) == n - 1) & (idx >= 0), -1, idx)
    gone[(n - 1) * T:] = -1

    def ours(x, i, w):
        recv, cnt, h = jaccl.moe_dispatch(x, i, w, num_experts=E, capacity=C, axis_name="x",
                                          lost_ranks=(n - 1,))
        return recv, cnt, jaccl.moe_combine(expert(recv), h, w, axis_name="x")

    live = (x[:(n - 1) * T], idx[:(n - 1) * T], w[:(n - 1) * T])
    got, _ = on(devices[:-1], ours, live, 3)
    theirs, _ = on(reference, reference_layer(E, C), (x, gone, w), 4)
    return compare(got, theirs, x.dtype, (n, T, H), "lost rank")


def provoke_bad_expert(devices=None):
    import jax
    import jax.numpy as jnp

    import jax_jaccl as jaccl

    devices = devices or jax.devices("gpu")
    n = len(devices)
    T, H, K, E, C = 8, 8, 2, 4 * n, 8
    x = np.ones((n * T, H), np.float32)
    idx = np.zeros((n * T, K), np.int32)
    idx[3, 1] = 99
    w = np.ones((n * T, K), np.float32)

    def dispatch(x, i, w):
        recv, _, _ = jaccl.moe_dispatch(x, i, w, num_experts=E, capacity=C, axis_name="x")
        return (jnp.sum(recv, keepdims=True),)

    try:
        out, _ = on(devices, dispatch, (x, idx, w), 1)
        jax.block_until_ready(out)
        print("NO ERROR", flush=True)
    except Exception as e:  # noqa: BLE001
        print("RAISED " + " ".join(str(e).split())[:300], flush=True)
