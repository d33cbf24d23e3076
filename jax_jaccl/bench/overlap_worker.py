"""One rank of `jaccl-bench overlap` (overlap.py starts it under jaccl-run, once with
JACCL_ASYNC=1 and once with 0): for each size S, a jaccl.all_reduce of S bytes alone (t_comm),
a chain of matmuls alone whose length this rank picks to take about t_comm (t_compute), and
one program with both and nothing between them (t_step); medians of --iters rounds, the three
interleaved. Every rank makes the same collective calls (the chain's length changes only its
own compute). Rank 0 writes [{bytes, links, comm_s, compute_s, step_s}] to --output.
"""

from __future__ import annotations

import argparse
import json

import jax_jaccl.distributed

jax_jaccl.distributed.initialize()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import jax_jaccl as jaccl  # noqa: E402

from .sizes import parse_sizes  # noqa: E402
from .timing import seconds  # noqa: E402

MATRIX = 512  # the chain's matmuls: float32[512, 512] @ float32[512, 512]


def chain(m, links):
    c = m
    for _ in range(links):
        c = jnp.tanh(c @ m) * 0.01
    return c


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    n = jax.process_count()
    mesh = Mesh(np.array(jax.devices()), ("x",))
    m = jnp.full((MATRIX, MATRIX), 0.001, jnp.float32)
    one_link = jax.jit(lambda m: chain(m, 1))
    seconds(one_link, m)
    t_link = np.median([seconds(one_link, m) for _ in range(5)])
    records = []
    for nbytes in parse_sizes(args.sizes):
        rows = max(1, nbytes // 4)
        x = jax.make_array_from_callback((n * rows,), NamedSharding(mesh, P("x")),
                                         lambda index: np.ones(rows, np.float32))
        comm = jax.jit(jax.shard_map(lambda t: jaccl.all_reduce(t, "x"), mesh=mesh,
                                     in_specs=P("x"), out_specs=P("x")))
        seconds(comm, x)
        t_comm = np.median([seconds(comm, x) for _ in range(3)])
        links = max(1, int(round(t_comm / t_link)))
        compute = jax.jit(lambda m: chain(m, links))
        step = jax.jit(jax.shard_map(lambda t, m: (jaccl.all_reduce(t, "x"), chain(m, links)),
                                     mesh=mesh, in_specs=(P("x"), P()), out_specs=(P("x"), P())))
        seconds(compute, m)
        seconds(step, x, m)
        times = {"comm_s": [], "compute_s": [], "step_s": []}
        for _ in range(args.iters):
            times["comm_s"].append(seconds(comm, x))
            times["compute_s"].append(seconds(compute, m))
            times["step_s"].append(seconds(step, x, m))
        records.append({"bytes": nbytes, "links": links,
                        **{k: float(np.median(v)) for k, v in times.items()}})
    if jax.process_index() == 0:
        with open(args.output, "w") as f:
            json.dump(records, f)


if __name__ == "__main__":
    main()
