"""Runs inside a jaccl-run job: times jax_jaccl's collectives (and jax's own, for --vs lax) on
one mesh axis over every device, and has rank 0 write one JSON record per measurement.

Each call is timed from dispatch to block_until_ready on rank 0, after warm-up; all_reduce
donates its input (the result reuses the buffer, as in a training step), for jax's psum too.
"""

from __future__ import annotations

import argparse
import json
import time

import jax_jaccl.distributed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--ops", required=True)
    parser.add_argument("--impls", required=True, help="comma list of jaccl, lax, local")
    parser.add_argument("--algorithm", default="auto")
    parser.add_argument("--output", required=True)
    parser.add_argument("--budget-mb", type=int, default=1024,
                        help="about this many MiB moved per measurement")
    args = parser.parse_args()
    index, count = jax_jaccl.distributed.initialize()

    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jax_jaccl as jaccl
    from jax_jaccl.bench.sizes import iterations, parse_sizes

    n = len(jax.devices())
    mesh = jax.make_mesh((n,), ("x",))
    sharding = NamedSharding(mesh, P("x"))

    def ops_for(impl):
        if impl == "local":  # no communication: a jit-compiled x + 1 on the same input
            return dict.fromkeys(("all_reduce", "reduce_scatter", "all_gather"), lambda v: v + 1)
        if impl == "jaccl":
            return {
                "all_reduce": lambda v: jaccl.all_reduce(v, "x", algorithm=args.algorithm),
                "reduce_scatter": lambda v: jaccl.reduce_scatter(
                    v, "x", tiled=True,
                    algorithm=args.algorithm if args.algorithm != "naive" else "auto"),
                "all_gather": lambda v: jaccl.all_gather(
                    v, "x", tiled=True,
                    algorithm=args.algorithm if args.algorithm != "naive" else "auto"),
            }
        return {
            "all_reduce": lambda v: jax.lax.psum(v, "x"),
            "reduce_scatter": lambda v: jax.lax.psum_scatter(v, "x", tiled=True),
            "all_gather": lambda v: jax.lax.all_gather(v, "x", tiled=True),
        }

    records = []
    for op in args.ops.split(","):
        for nbytes in parse_sizes(args.sizes):
            # Elements per device: S for all_reduce and reduce_scatter, S/n for all_gather.
            per_device = nbytes // 4 // (n if op == "all_gather" else 1)
            per_device -= per_device % n
            for impl in args.impls.split(","):
                fn = ops_for(impl)[op]
                donate = (0,) if op == "all_reduce" or impl == "local" else ()
                f = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                          check_vma=False), donate_argnums=donate)
                x = jax.make_array_from_callback(
                    (n * per_device,), sharding, lambda i: np.zeros(n * per_device, np.float32)[i])
                reps = iterations(nbytes, args.budget_mb << 20)
                times = []
                for i in range(reps + 3):
                    start = time.perf_counter()
                    y = f(x)
                    y.block_until_ready()
                    if i >= 3:
                        times.append(time.perf_counter() - start)
                    if donate:
                        x = y
                records.append({"impl": impl, "op": op, "bytes": nbytes, "ranks": n,
                                "median_s": float(np.median(times)), "min_s": float(np.min(times)),
                                "iters": reps})
                del x, y
    if index == 0:
        with open(args.output, "w") as f:
            json.dump(records, f)


if __name__ == "__main__":
    main()
