"""MoE dispatch and combine across processes (and hosts): every case of tests/unit/test_moe.py
against the jax.numpy reference in the same job, bitwise; gradients against the reference.
Prints `OK name` per check and `DONE`."""

from __future__ import annotations

from common import start

args, index, count = start(__doc__)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import jax_jaccl as jaccl  # noqa: E402
import moe_reference as ref  # noqa: E402
from test_moe import CASES, expert, routing  # noqa: E402

devices = jax.devices()
n = len(devices)
mesh = jax.make_mesh((n,), ("x",))
print(f"WORLD {jaccl.init().host_count} hosts", flush=True)
print(f"TRANSPORT {jaccl.init().transport}", flush=True)


def put(a):
    return jax.make_array_from_callback(a.shape, NamedSharding(mesh, P("x")), lambda i: a[i])


def smap(fn, n_in, n_out):
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=(P("x"),) * n_in,
                                 out_specs=(P("x"),) * n_out))


def local(a):
    return {s.device.id: np.asarray(s.data, np.float32) for s in a.addressable_shards}


def same(name, a, b):
    la, lb = local(a), local(b)
    for dev in la:
        np.testing.assert_array_equal(la[dev], lb[dev], err_msg=f"{name} on device {dev}")
    print(f"OK {name}", flush=True)


for case, (T, H, K, E, C, kind) in CASES.items():
    if E % n:
        continue
    for dtype in (np.float32, jnp.bfloat16):
        rng = np.random.default_rng(0)
        x = (rng.integers(-64, 64, size=(n * T, H)) / 16).astype(dtype)
        idx = np.concatenate([routing(kind, T, K, E, r) for r in range(n)])
        w = rng.random(size=(n * T, K)).astype(np.float32)

        def ours(x, i, w):
            recv, cnt, h = jaccl.moe_dispatch(x, i, w, num_experts=E, capacity=C, axis_name="x")
            return recv[None], cnt[None], jaccl.moe_combine(expert(recv), h, w, axis_name="x")[None]

        def theirs(x, i, w):
            recv, cnt, _ = ref.dispatch(x, i, num_experts=E, capacity=C, axis="x")
            products, ok = ref.pair_products(expert(recv), i, w, num_experts=E, capacity=C, axis="x")
            return recv[None], cnt[None], products, ok

        a = put(x), put(idx), put(w)
        recv, cnt, out = smap(ours, 3, 3)(*a)
        f_recv, f_cnt, products, ok = smap(theirs, 3, 4)(*a)
        want = jax.jit(ref.accumulate, static_argnums=2)(products, ok, x.dtype)
        name = f"{case}/{np.dtype(dtype).name}"
        same(name + "/recv_x", recv, f_recv)
        same(name + "/recv_count", cnt, f_cnt)
        same(name + "/combine", out, want.reshape(out.shape))

T, H, K, E, C, _ = CASES["random"]
rng = np.random.default_rng(5)
x = rng.normal(size=(n * T, H)).astype(np.float32)
idx = np.concatenate([routing("random", T, K, E, 10 + r) for r in range(n)])
w = rng.random(size=(n * T, K)).astype(np.float32)


def grads(dispatch_combine):
    def f(x, w, i):
        out = jax.shard_map(dispatch_combine, mesh=mesh, in_specs=(P("x"),) * 3, out_specs=P("x"))(x, i, w)
        return jnp.sum(out * out)
    return jax.jit(jax.grad(f, argnums=(0, 1)))(put(x), put(w), put(idx))


def ours(x, i, w):
    recv, _, h = jaccl.moe_dispatch(x, i, w, num_experts=E, capacity=C, axis_name="x")
    return jaccl.moe_combine(jnp.tanh(recv), h, w, axis_name="x")


def theirs(x, i, w):
    recv, _, _ = ref.dispatch(x, i, num_experts=E, capacity=C, axis="x")
    products, ok = ref.pair_products(jnp.tanh(recv), i, w, num_experts=E, capacity=C, axis="x")
    return ref.accumulate(products, ok, x.dtype)


for name, a, b in zip(("dx", "dw"), grads(ours), grads(theirs)):
    la, lb = local(a), local(b)
    for dev in la:
        np.testing.assert_allclose(la[dev], lb[dev], rtol=1e-5, atol=1e-6, err_msg=name)
    print(f"OK grad/{name}", flush=True)
print("DONE", flush=True)
