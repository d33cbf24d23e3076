"""Data-parallel training with sharded parameters (ZeRO-style), run with jaccl-run.

    jaccl-run -n 2 --devices-per-process 2 -- python examples/train_data_parallel.py

Every device holds 1/N of the flattened parameters and of the optimizer state of an MLP (2.2M
parameters by default) fitting noisy targets, a fresh batch each step (the loss settles near the
noise's variance, 0.01, never near zero). A jit-compiled step all-gathers the parameters
(jaccl.all_gather), computes the loss and gradients on the device's slice of the batch,
reduce-scatters the gradients (jaccl.reduce_scatter) and updates its parameter slice with Adam.
The same step written with jax.lax collectives runs beside it, from the same state at every step
(jaccl's step carries the training on), for --seconds (or --steps); the script prints both
losses and both step times every --every steps, and at the end the median step time of each.

The check: where jax.lax's collectives run on jaccl's engine too (jaccl-run's default with one
device per process, `--xla-collectives jaccl` otherwise) both steps sum in the same order and
must agree bit for bit at every step: loss, gradient and new parameters. On gloo, which sums in
another order, each step's loss, and every --every steps the reduced gradient, must lie within
float32's summation-order bound of jaccl's: two orders of summing n terms differ by at most
(n - 1) eps times the sum of their magnitudes (the loss: n positive local losses; the gradient:
the magnitudes summed by a separate untimed call). This takes the two programs' local arithmetic
to be the same, as XLA compiles the same computation alike. The script exits non-zero where
either check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

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


def make_step(unravel, num_devices, collectives, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
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
        return shard, m, v, mean(loss), grad

    return step


def make_magnitudes(unravel, num_devices):
    """Each device's slice of (sum over devices of |local gradient|) / num_devices: what bounds
    the difference between two orders of summing the gradient (jaccl's collectives; their
    order does not matter to this bound)."""
    def loss_fn(flat, x, y):
        return jnp.mean((mlp(unravel(flat), x) - y) ** 2)

    def magnitudes(shard, x, y):
        grad = jax.grad(loss_fn)(jaccl.all_gather(shard, AXIS, tiled=True), x, y)
        return jaccl.reduce_scatter(jnp.abs(grad), AXIS, tiled=True) / num_devices

    return magnitudes


EPS = float(np.finfo(np.float32).eps)


def within_summation_bound(got, want, magnitude, terms):
    """The largest |got - want| / ((terms + 1) eps magnitude) over the elements (<= 1: within
    the bound of two summation orders of `terms` float32 numbers, one rounding of the division
    by the device count and one of the difference allowed beside it)."""
    got, want, magnitude = (np.asarray(a, np.float64) for a in (got, want, magnitude))
    bound = (terms + 1) * EPS * magnitude + np.finfo(np.float32).tiny
    return float(np.max(np.abs(got - want) / bound))


CARRIED_BY = {"jaccl": "jaccl's engine too", "gloo": "JAX's own (gloo)"}
WARMUP = 5  # steps before the time budget becomes a step count


def local(array):
    """This process's shards of `array`, in device order, as one numpy array."""
    return np.concatenate([np.asarray(s.data).ravel() for s in
                           sorted(array.addressable_shards, key=lambda s: s.device.id)])


def steps_in_budget(seconds, elapsed, times):
    """How many steps fit in `seconds` (`elapsed` of them gone) at the pace of the warm-up
    steps after the first (which compiles), as process 0 measured it: every process must take
    the same number of steps."""
    from jax.experimental import multihost_utils

    pace = sum(float(np.median(ts[1:])) for ts in times.values())
    mine = np.int32(WARMUP + max(0, int((seconds - elapsed) / pace)))
    return int(multihost_utils.broadcast_one_to_all(mine))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="train for this long (both steps together), unless --steps")
    parser.add_argument("--steps", type=int, default=0, help="train for this many steps")
    parser.add_argument("--every", type=int, default=25, help="a progress line every N steps")
    parser.add_argument("--batch", type=int, default=256, help="examples per step, all devices")
    parser.add_argument("--width", type=int, default=1024, help="hidden layers' width")
    parser.add_argument("--depth", type=int, default=3, help="hidden layers")
    parser.add_argument("--json", default=None, help="process 0 writes the step times here")
    args = parser.parse_args()

    devices = jax.devices()
    n = len(devices)
    mesh = jax.make_mesh((n,), (AXIS,))
    features = 64
    params = init_params(jax.random.PRNGKey(0), [features] + [args.width] * args.depth + [1])
    flat, unravel = ravel_pytree(params)
    num_params = flat.size
    flat = jnp.pad(flat, (0, -num_params % n))  # shards must be equal

    def unravel_padded(f):
        return unravel(f[:num_params])

    teacher = np.random.default_rng(0).normal(size=(features, 1)) / np.sqrt(features)

    def sharded(a):
        return jax.make_array_from_callback(a.shape, NamedSharding(mesh, P(AXIS)), lambda i: a[i])

    def batch(t):
        """Step t's examples, fresh each step (the same on every process: seeded by t), with
        noise in the targets: no model fits them, and the loss stays near the noise's 0.01."""
        rng = np.random.default_rng(t)
        x = rng.normal(size=(args.batch, features)).astype(np.float32)
        y = np.sin(x @ teacher) + 0.1 * rng.normal(size=(args.batch, 1))
        return sharded(x), sharded(y.astype(np.float32))

    jaccl_ops = (lambda s: jaccl.all_gather(s, AXIS, tiled=True),
                 lambda g: jaccl.reduce_scatter(g, AXIS, tiled=True),
                 lambda l: jaccl.all_reduce(l, AXIS) / n)
    lax_ops = (lambda s: jax.lax.all_gather(s, AXIS, tiled=True),
               lambda g: jax.lax.psum_scatter(g, AXIS, tiled=True),
               lambda l: jax.lax.pmean(l, AXIS))
    specs = dict(mesh=mesh, in_specs=(P(AXIS),) * 3 + (P(), P(AXIS), P(AXIS)),
                 out_specs=(P(AXIS), P(AXIS), P(AXIS), P(), P(AXIS)))
    steps = {name: jax.jit(jax.shard_map(make_step(unravel_padded, n, ops), **specs))
             for name, ops in (("jaccl", jaccl_ops), ("lax", lax_ops))}
    magnitudes = jax.jit(jax.shard_map(make_magnitudes(unravel_padded, n), mesh=mesh,
                                       in_specs=(P(AXIS),) * 3, out_specs=P(AXIS)))

    flat_np = np.asarray(flat)
    state = (sharded(flat_np), sharded(np.zeros_like(flat_np)), sharded(np.zeros_like(flat_np)))
    from jax_jaccl import _xla_collectives

    carrier = "jaccl" if _xla_collectives.active() else "gloo"
    bitwise = carrier == "jaccl"  # the same engine sums in the same order
    per_process = n // process_count
    layout = f"{process_count} x {per_process}"
    if process_index == 0:
        print(f"{process_count} processes x {per_process} device{'s' if per_process > 1 else ''}, {num_params:,} "
              f"parameters sharded {n} ways, batch {args.batch}; the jax.lax step's collectives: "
              f"{CARRIED_BY[carrier]}")
        print(f"{'step':>5} {'loss (jaccl)':>13} {'loss (jax.lax)':>15} {'|diff|':>9} "
              f"{'ms/step jaccl':>14} {'jax.lax':>8}", flush=True)
    worst, mismatches, times = 0.0, [], {name: [] for name in steps}
    total, t, started = args.steps, 0, time.monotonic()
    while True:
        if not total and t == WARMUP:
            total = steps_in_budget(args.seconds, time.monotonic() - started, times)
        if total and t >= total:
            break
        t += 1
        xs, ys = batch(t)
        out = {}
        for name, step in steps.items():  # both from jaccl's state
            begin = time.perf_counter()
            out[name] = step(*state, jnp.float32(t), xs, ys)
            out[name][3].block_until_ready()
            times[name].append(time.perf_counter() - begin)
        losses = {name: float(o[3]) for name, o in out.items()}
        checked = t % args.every == 0 or t == 1 or t == total
        if bitwise:  # every output, every step
            if not all(np.array_equal(local(a), local(b), equal_nan=False)
                       for a, b in zip(out["jaccl"], out["lax"])):
                mismatches.append(t)
        else:
            ratio = within_summation_bound(losses["lax"], losses["jaccl"], losses["jaccl"], n)
            if checked:
                ratio = max(ratio, within_summation_bound(local(out["lax"][4]), local(out["jaccl"][4]),
                                                          local(magnitudes(state[0], xs, ys)), n))
            worst = max(worst, ratio)
            if not ratio <= 1:  # a NaN difference fails too
                mismatches.append(t)
        state = out["jaccl"][:3]
        if process_index == 0 and (t % args.every == 0 or t == 1):
            print(f"{t:>5} {losses['jaccl']:>13.6f} {losses['lax']:>15.6f} "
                  f"{abs(losses['jaccl'] - losses['lax']):>9.2e} "
                  f"{times['jaccl'][-1] * 1e3:>14.1f} {times['lax'][-1] * 1e3:>8.1f}", flush=True)
    # the first step of each compiles: the medians are over the rest
    median = {name: float(np.median(ts[1:] or ts)) for name, ts in times.items()}
    from jax.experimental import multihost_utils

    # every process's verdict (the gradient is compared shard by shard, on each process)
    ok = int(np.max(multihost_utils.process_allgather(np.int32(len(mismatches))))) == 0
    if not ok and not mismatches:
        mismatches = ["on another process"]
    agreement = ("bit for bit (the same engine)" if bitwise else
                 f"within float32's summation-order bound ({worst:.2f} of it at worst)")
    if process_index == 0:
        print(f"{t} steps. Median step time: jaccl {median['jaccl'] * 1e3:.1f} ms, jax.lax on "
              f"{carrier} {median['lax'] * 1e3:.1f} ms ({median['lax'] / median['jaccl']:.2f}x jaccl's)")
        print(f"OK: every step's jaccl and jax.lax results agree {agreement}" if ok else
              f"MISMATCH: jaccl and jax.lax differ at step(s) {mismatches[:10]}: not {agreement}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"layout": layout, "carrier": carrier, "steps": t, "params": num_params,
                           "jaccl_s": median["jaccl"], "lax_s": median["lax"], "ok": ok}, f)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
