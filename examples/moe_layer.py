"""An expert-parallel MoE MLP trained with jaccl.moe_dispatch / moe_combine, run with jaccl-run.

    jaccl-run -n 2 --devices-per-process 2 -- python examples/moe_layer.py [--dropless]

Every device holds a slice of the tokens and `experts / devices` of the experts. A
jit-compiled step routes each token to its top-k experts (moe_dispatch), runs the local
experts on the rows they received, sends the results back weighted by the router
(moe_combine), and trains router and experts with Adam; the router's gradient is summed
over devices with jaccl.all_reduce. The same model written densely on one device (every
token through its k experts, no communication) trains beside it from the same start; the
script prints both losses per step and exits non-zero if they differ. With --dropless,
dispatch keeps every routed row, grouped by local expert, and the experts run as
jax.lax.ragged_dot over the groups.
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
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

AXIS = "ep"


def init(key, dim, hidden, experts):
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "router": jax.random.normal(k1, (dim, experts)) / np.sqrt(dim),
        "w1": jax.random.normal(k2, (experts, dim, hidden)) / np.sqrt(dim),
        "w2": jax.random.normal(k3, (experts, hidden, dim)) / np.sqrt(hidden),
    }


def route(router, x, k):
    logits = x @ router
    top, idx = jax.lax.top_k(logits, k)
    return idx.astype(jnp.int32), jax.nn.softmax(top, axis=-1).astype(jnp.float32)


def expert_mlp(w1, w2, rows):
    return jnp.tanh(rows @ w1) @ w2


def dense_loss(params, x, target, k):
    """Every token through its k experts on one device."""
    idx, weights = route(params["router"], x, k)
    outs = jax.vmap(lambda w1, w2: expert_mlp(w1, w2, x))(params["w1"], params["w2"])  # [E, T, D]
    picked = outs[idx, jnp.arange(x.shape[0])[:, None]]                                 # [T, k, D]
    out = jnp.sum(weights[..., None] * picked, axis=1)
    return jnp.mean((out - target) ** 2)


def grouped_expert_mlp(w1, w2, rows, group_sizes):
    """The local experts on their groups of rows (dropless layout): one ragged_dot per layer."""
    h = jnp.tanh(jax.lax.ragged_dot(rows, w1, group_sizes=group_sizes))
    return jax.lax.ragged_dot(h, w2, group_sizes=group_sizes)


def parallel_loss(params, x, target, k, experts, capacity, n):
    """Inside shard_map: tokens and experts split over AXIS. capacity None: dropless."""
    idx, weights = route(params["router"], x, k)
    if capacity is None:
        # every routed row arrives, grouped by local expert: recv [M, D], counts [E_loc]
        recv, counts, handle = jaccl.moe_dispatch(x, idx, weights, num_experts=experts,
                                                  axis_name=AXIS, dropless=True)
        y = grouped_expert_mlp(params["w1"], params["w2"], recv, counts)
    else:
        recv, _, handle = jaccl.moe_dispatch(x, idx, weights, num_experts=experts,
                                             capacity=capacity, axis_name=AXIS)
        y = jax.vmap(expert_mlp)(params["w1"], params["w2"], recv)
    out = jaccl.moe_combine(y, handle, weights, axis_name=AXIS)
    local = jnp.sum((out - target) ** 2) / (x.shape[0] * n * x.shape[1])
    return local  # summed over devices by the caller


def adam(params, grads, state, t, lr=3e-3, b1=0.9, b2=0.999, eps=1e-8):
    m, v = state
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    params = jax.tree.map(lambda p, m, v: p - lr * (m / (1 - b1 ** t)) / (jnp.sqrt(v / (1 - b2 ** t)) + eps),
                          params, m, v)
    return params, (m, v)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=64, help="per device")
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--experts-per-device", type=int, default=2)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--dropless", action="store_true",
                        help="dropless dispatch, the experts as jax.lax.ragged_dot over groups")
    args = parser.parse_args()

    n = len(jax.devices())
    experts = n * args.experts_per_device
    # room for every token (no drops, so the dense model is exact), or dropless
    capacity = None if args.dropless else n * args.tokens
    mesh = jax.make_mesh((n,), (AXIS,))
    params = init(jax.random.PRNGKey(0), args.dim, args.hidden, experts)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n * args.tokens, args.dim)).astype(np.float32)
    target = np.sin(x @ rng.normal(size=(args.dim, args.dim))).astype(np.float32)

    def sharded(a, spec):
        return jax.make_array_from_callback(a.shape, NamedSharding(mesh, spec), lambda i: a[i])

    specs = {"router": P(), "w1": P(AXIS), "w2": P(AXIS)}

    def step_body(params, x, target):
        loss, grads = jax.value_and_grad(parallel_loss)(params, x, target, args.k, experts,
                                                        capacity, n)
        # Tokens on every device train the replicated router: sum its gradient.
        grads["router"] = jaccl.all_reduce(grads["router"], AXIS)
        return jaccl.all_reduce(loss, AXIS), grads

    parallel_step = jax.jit(jax.shard_map(step_body, mesh=mesh,
                                          in_specs=(specs, P(AXIS), P(AXIS)),
                                          out_specs=(P(), specs)))
    dense_step = jax.jit(jax.value_and_grad(lambda p, x, t: dense_loss(p, x, t, args.k)))
    update = jax.jit(adam)

    host = jax.tree.map(np.asarray, params)
    par = {name: sharded(host[name], specs[name]) for name in host}
    dense = jax.tree.map(jnp.asarray, host)
    zeros = lambda p: (jax.tree.map(jnp.zeros_like, p), jax.tree.map(jnp.zeros_like, p))  # noqa: E731
    par_state, dense_state = zeros(par), zeros(dense)
    xs, ts = sharded(x, P(AXIS)), sharded(target, P(AXIS))
    worst = 0.0
    if process_index == 0:
        print(f"{process_count} processes x {n // process_count} devices, {experts} experts "
              f"({args.experts_per_device} per device), top-{args.k}, {n * args.tokens} tokens"
              + (", dropless (ragged_dot)" if args.dropless else ""))
        print(f"{'step':>4} {'loss (expert-parallel)':>23} {'loss (dense)':>13} {'|diff|':>10}")
    for t in range(1, args.steps + 1):
        loss, grads = parallel_step(par, xs, ts)
        par, par_state = update(par, grads, par_state, float(t))
        d_loss, d_grads = dense_step(dense, x, target)
        dense, dense_state = update(dense, d_grads, dense_state, float(t))
        diff = abs(float(loss) - float(d_loss))
        worst = max(worst, diff / abs(float(d_loss)))
        if process_index == 0:
            print(f"{t:>4} {float(loss):>23.6f} {float(d_loss):>13.6f} {diff:>10.2e}")
    ok = worst <= 1e-4
    if process_index == 0:
        print(("OK" if ok else "MISMATCH") + f": expert-parallel and dense losses agree to {worst:.1e}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
