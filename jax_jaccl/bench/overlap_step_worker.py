"""One rank of `jaccl-bench overlap --workload step` (overlap.py starts it under jaccl-run, once
with JACCL_ASYNC=1 and once with 0): a data-parallel training step of an MLP whose gradients
are reduced layer by layer, as users write it.

For each size S (one layer's float32 weight: width = sqrt(S / 4)), --layers layers: the step
computes loss and gradients on this device's batch, all-reduces every layer's weight and bias
gradients with jaccl.all_reduce, last layer first (the order backpropagation produces them:
jaccl calls of one block run in program order, so the first reduction can start while the
layers below are still differentiated), and updates the weights. Measured alone too: the
gradients without the reductions (t_compute) and the reductions of gradient-shaped arrays
(t_comm), and the forward pass (the loss) alone, before which no reduction can start
(t_forward). The batch is chosen so that t_compute is about t_comm (each rank estimates it, the
largest wins, so every rank runs the same shapes). Medians of --iters rounds, the three
interleaved. Rank 0 writes [{bytes, layers, batch, comm_s, compute_s, step_s, forward_s}] to
--output.
"""

from __future__ import annotations

import argparse
import json
import math

import jax_jaccl.distributed

jax_jaccl.distributed.initialize()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import jax_jaccl as jaccl  # noqa: E402

from .sizes import parse_sizes  # noqa: E402
from .timing import seconds  # noqa: E402

BASE_BATCH = 64  # rows per device of the calibration run


def mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)


def reduce_layers(grads):
    """Every layer's gradients summed over the devices, last layer first."""
    out = [None] * len(grads)
    for i in reversed(range(len(grads))):
        gw, gb = grads[i]
        out[i] = (jaccl.all_reduce(gw, "x"), jaccl.all_reduce(gb, "x"))
    return out


def update(params, grads, lr=1e-3):
    return [(w - lr * gw, b - lr * gb) for (w, b), (gw, gb) in zip(params, grads)]


def programs(mesh):
    def on_mesh(body, in_specs):
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=P(),
                                     check_vma=False))

    compute = on_mesh(lambda p, x, y: update(p, jax.grad(loss)(p, x, y)), (P(), P("x"), P("x")))
    comm = on_mesh(reduce_layers, (P(),))
    step = on_mesh(lambda p, x, y: update(p, reduce_layers(jax.grad(loss)(p, x, y))),
                   (P(), P("x"), P("x")))
    return compute, comm, step


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    n = jax.process_count()
    mesh = Mesh(np.array(jax.devices()), ("x",))
    compute, comm, step = programs(mesh)
    forward = jax.jit(jax.shard_map(loss, mesh=mesh, in_specs=(P(), P("x"), P("x")),
                                    out_specs=P(), check_vma=False))
    agree = jax.jit(jax.shard_map(lambda v: jaccl.all_reduce(v, "x", op="max"), mesh=mesh,
                                  in_specs=P("x"), out_specs=P("x")))

    def batch_of(rows, width):
        return jax.make_array_from_callback((n * rows, width), NamedSharding(mesh, P("x")),
                                            lambda index: np.full((rows, width), 0.1, np.float32))

    records = []
    for nbytes in parse_sizes(args.sizes):
        width = max(8, int(math.sqrt(nbytes // 4)))
        params = [(jnp.full((width, width), 1.0 / width, jnp.float32),
                   jnp.zeros((width,), jnp.float32)) for _ in range(args.layers)]
        seconds(comm, params)
        t_comm = float(np.median([seconds(comm, params) for _ in range(3)]))
        x, y = batch_of(BASE_BATCH, width), batch_of(BASE_BATCH, width)
        seconds(compute, params, x, y)
        t_base = float(np.median([seconds(compute, params, x, y) for _ in range(3)]))
        mine = max(1, round(BASE_BATCH * t_comm / t_base))
        votes = jax.make_array_from_callback((n,), NamedSharding(mesh, P("x")),
                                             lambda index: np.array([mine], np.int32))
        rows = int(np.asarray(agree(votes).addressable_shards[0].data)[0])
        x, y = batch_of(rows, width), batch_of(rows, width)
        seconds(compute, params, x, y)
        seconds(step, params, x, y)
        seconds(forward, params, x, y)
        times = {"comm_s": [], "compute_s": [], "step_s": [], "forward_s": []}
        for _ in range(args.iters):
            times["forward_s"].append(seconds(forward, params, x, y))
            times["comm_s"].append(seconds(comm, params))
            times["compute_s"].append(seconds(compute, params, x, y))
            times["step_s"].append(seconds(step, params, x, y))
        records.append({"bytes": nbytes, "layers": args.layers, "batch": rows,
                        **{k: float(np.median(v)) for k, v in times.items()}})
    if jax.process_index() == 0:
        with open(args.output, "w") as f:
            json.dump(records, f)


if __name__ == "__main__":
    main()
