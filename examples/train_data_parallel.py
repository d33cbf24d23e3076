"""Data-parallel training with sharded parameters (ZeRO-style), run with jaccl-run.

    jaccl-run -n 2 --devices-per-process 2 -- python examples/train_data_parallel.py

Every device holds 1/N of the flattened parameters and of the optimizer state. A jit-compiled
step all-gathers the parameters (jaccl.all_gather), computes the loss and gradients on the
device's slice of the batch, reduce-scatters the gradients (jaccl.reduce_scatter) and updates
its parameter slice with Adam. The same step written with jax.lax collectives runs beside it
from the same start; the script prints both losses per step and exits non-zero if they differ.
With one device per process (jaccl-run -n 4 -- python ...) the jax.lax step's own collectives
run on jaccl's engine too (jaccl-run's default there, docs/transparent.md); the script says
which carried them.
"""

from __future__ import annotations

import argparse
import sys

import jax_jaccl as jaccl
import jax_jaccl.distributed

process_index, process_count = jax_jaccl.distributed.initialize()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

AXIS = "data"


def init_params(key, sizes):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, k = jax.random.split(key)
        params.append({"w": jax.random.normal(k, (fan_in, fan_out)) / np.sqrt(fan_in),
                       "b": jnp.zeros((fan_out,))})
    return params


def mlp(params, x):
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def make_step(unravel, num_devices, collectives, lr=1e-2, b1=0.9, b2=0.999, eps=1e-8):
    gather, scatter, mean = collectives

    def loss_fn(flat, x, y):
        return jnp.mean((mlp(unravel(flat), x) - y) ** 2)

    def step(shard, m, v, t, x, y):
        flat = gather(shard)                      # full parameters on every device
        loss, grad = jax.value_and_grad(loss_fn)(flat, x, y)
        grad = scatter(grad) / num_devices        # this device's slice of the mean gradient
        m = b1 * m + (1 - b1) * grad
        v = b2 * v + (1 - b2) * grad ** 2
        m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)
        shard = shard - lr * m_hat / (jnp.sqrt(v_hat) + eps)
        return shard, m, v, mean(loss)

    return step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()

    devices = jax.devices()
    n = len(devices)
    mesh = jax.make_mesh((n,), (AXIS,))
    params = init_params(jax.random.PRNGKey(0), [16, 64, 64, 1])
    flat, unravel = ravel_pytree(params)
    num_params = flat.size
    flat = jnp.pad(flat, (0, -num_params % n))  # shards must be equal

    def unravel_padded(f):
        return unravel(f[:num_params])

    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch, 16)).astype(np.float32)
    y = np.sin(x @ rng.normal(size=(16, 1))).astype(np.float32)

    def sharded(a):
        return jax.make_array_from_callback(a.shape, NamedSharding(mesh, P(AXIS)), lambda i: a[i])

    jaccl_ops = (lambda s: jaccl.all_gather(s, AXIS, tiled=True),
                 lambda g: jaccl.reduce_scatter(g, AXIS, tiled=True),
                 lambda l: jaccl.all_reduce(l, AXIS) / n)
    lax_ops = (lambda s: jax.lax.all_gather(s, AXIS, tiled=True),
               lambda g: jax.lax.psum_scatter(g, AXIS, tiled=True),
               lambda l: jax.lax.pmean(l, AXIS))
    specs = dict(mesh=mesh, in_specs=(P(AXIS),) * 3 + (P(), P(AXIS), P(AXIS)),
                 out_specs=(P(AXIS), P(AXIS), P(AXIS), P()))
    steps = {name: jax.jit(jax.shard_map(make_step(unravel_padded, n, ops), **specs))
             for name, ops in (("jaccl", jaccl_ops), ("lax", lax_ops))}

    flat_np = np.asarray(flat)
    state = {name: (sharded(flat_np), sharded(np.zeros_like(flat_np)), sharded(np.zeros_like(flat_np)))
             for name in steps}
    xs, ys = sharded(x), sharded(y)
    worst = 0.0
    if process_index == 0:
        from jax_jaccl import _transparent

        carrier = "jaccl's engine too" if _transparent.active() else "JAX's own (gloo)"
        local = n // process_count
        print(f"{process_count} processes x {local} device{'s' if local > 1 else ''}, {num_params} parameters "
              f"sharded {n} ways, batch {args.batch}; the jax.lax step's collectives: {carrier}")
        print(f"{'step':>4} {'loss (jaccl)':>14} {'loss (jax.lax)':>15} {'|diff|':>10}")
    for t in range(1, args.steps + 1):
        losses = {}
        for name, step in steps.items():
            shard, m, v = state[name]
            shard, m, v, loss = step(shard, m, v, jnp.float32(t), xs, ys)
            state[name] = (shard, m, v)
            losses[name] = float(loss)
        diff = abs(losses["jaccl"] - losses["lax"])
        worst = max(worst, diff / max(abs(losses["lax"]), 1e-12))
        if process_index == 0:
            print(f"{t:>4} {losses['jaccl']:>14.6f} {losses['lax']:>15.6f} {diff:>10.2e}")
    ok = worst <= 1e-4
    if process_index == 0:
        print(("OK" if ok else "MISMATCH") + f": jaccl and jax.lax losses agree to {worst:.1e} (relative)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
