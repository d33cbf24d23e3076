"""Runs inside a jaccl-run job: times jax_jaccl's collectives (and jax's own, for --vs lax) on
one mesh axis over every device, and has rank 0 write one JSON record per measurement.

Each call is timed from dispatch to block_until_ready on rank 0, after warm-up. With --donate
yes (the default) all_reduce and ppermute donate their input (the result reuses the buffer, as in
a training step or a pipeline stage), for jax's own too, and so does the local x + 1; with --donate
no nothing is donated. With --operand intermediate every op (not `local`) takes its argument
halved in the same program, as a training step's collective takes a gradient: XLA then adds
no copy around either side's op (docs/xla-collectives.md, "Speed"). ppermute is a shift by one
(every rank sends S bytes to the next). ragged_all_to_all: each rank holds S bytes of rows, one
slot of S/n per peer, filled to RAGGED_FILL; jaccl sends only the filled rows, jax (whose
XLA:CPU has no ragged all-to-all) the equivalent padded all_to_all of whole slots, and
"jaccl_padded" is jaccl's own padded all_to_all.

With --engine-time the engine keeps its own time per call (collectives/call_times.h), for the
impls that reach it through run_collective (jaccl's ops, and jax.lax's on jaccl but ppermute,
which the mpiabi library runs as point-to-point transfers); a record then has engine_median_s:
the median over calls of the rank that spent least in the engine on that call (the last to
arrive, which waits for no peer), so a call's time less it is what lies outside the engine.
"""

from __future__ import annotations

import argparse
import json
import time

import jax_jaccl.distributed


ROW = 256            # float32 elements per ragged row (1 KiB)
RAGGED_FILL = 0.25   # share of each slot's rows that exist


ENGINE_IMPLS = ("jaccl", "jaccl_padded", "lax_on_jaccl")


def engine_median(kept: dict, calls: int) -> float | None:
    """The median over calls of the least engine time any rank spent on the call, from each
    process's take_call_times(); None where a device kept other than one time per call (an op
    that does not reach run_collective)."""
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    devices = jax.local_device_count()
    whole = len(kept) == devices and all(len(t) == calls for t in kept.values())
    mine = (np.asarray([kept[d] for d in sorted(kept)]) if whole
            else np.full((devices, calls), np.nan))
    # every process takes part in the gather, whole or not, so all agree on the answer
    per_call = np.asarray(multihost_utils.process_allgather(mine)).reshape(-1, calls)
    if np.isnan(per_call).any():
        return None
    return float(np.median(per_call.min(axis=0)))


def all_reduces_own(algorithm: str) -> str:
    """The algorithm reduce_scatter and all_gather run when --algorithm names one of
    all_reduce's alone (naive, cascade): their automatic choice."""
    return "auto" if algorithm in ("naive", "cascade") else algorithm


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--ops", required=True)
    parser.add_argument("--impls", required=True,
                        help="comma list of jaccl, lax, local; lax_on_jaccl: jax.lax's ops in a "
                             "job whose XLA collectives run on jaccl (--xla-collectives jaccl)")
    parser.add_argument("--algorithm", default="auto")
    parser.add_argument("--donate", choices=("yes", "no"), default="yes")
    parser.add_argument("--operand", choices=("argument", "intermediate"), default="argument")
    parser.add_argument("--output", required=True)
    parser.add_argument("--engine-time", action="store_true",
                        help="also the engine's own time per call (engine_median_s)")
    parser.add_argument("--budget-mb", type=int, default=1024,
                        help="about this many MiB moved per measurement")
    args = parser.parse_args()
    index, count = jax_jaccl.distributed.initialize()
    from jax_jaccl import _ext, _xla_collectives

    if "lax_on_jaccl" in args.impls.split(","):
        assert _xla_collectives.active(), \
            f"lax_on_jaccl needs --xla-collectives jaccl: {_xla_collectives.problem()}"

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jax_jaccl as jaccl
    from jax_jaccl.bench.sizes import iterations, parse_sizes

    n = len(jax.devices())
    mesh = jax.make_mesh((n,), ("x",))
    sharding = NamedSharding(mesh, P("x"))

    shift = [(i, (i + 1) % n) for i in range(n)]

    def ops_for(impl):
        if impl == "local":  # no communication: a jit-compiled x + 1 on the same input; for
            # all_gather the gathered output (a fresh buffer, as jaccl's is) from the input alone
            ops = dict.fromkeys(("all_reduce", "reduce_scatter", "ppermute",
                                 "ragged_all_to_all"), lambda v: v + 1)
            return dict(ops, all_gather=lambda v: jnp.tile(v, n))
        if impl == "jaccl_padded":
            return {"ragged_all_to_all": padded_all_to_all(jaccl.all_to_all)}
        if impl == "jaccl":
            return {
                "ppermute": lambda v: jaccl.ppermute(v, "x", shift),
                "ragged_all_to_all": ragged,
                "all_reduce": lambda v: jaccl.all_reduce(v, "x", algorithm=args.algorithm),
                "reduce_scatter": lambda v: jaccl.reduce_scatter(
                    v, "x", tiled=True,
                    algorithm=all_reduces_own(args.algorithm)),
                "all_gather": lambda v: jaccl.all_gather(
                    v, "x", tiled=True,
                    algorithm=all_reduces_own(args.algorithm)),
            }
        return {
            "all_reduce": lambda v: jax.lax.psum(v, "x"),
            "reduce_scatter": lambda v: jax.lax.psum_scatter(v, "x", tiled=True),
            "all_gather": lambda v: jax.lax.all_gather(v, "x", tiled=True),
            "ppermute": lambda v: jax.lax.ppermute(v, "x", shift),
            "ragged_all_to_all": padded_all_to_all(jax.lax.all_to_all),
        }

    def slots(v):
        """[n, slot rows, ROW] view of a rank's buffer: one slot per peer."""
        return v.reshape(n, -1, ROW)

    def padded_all_to_all(all_to_all):
        return lambda v: all_to_all(slots(v), "x", 0, 0, tiled=True).reshape(v.shape)

    def ragged(v):
        # slot q of this rank goes to rank q, into slot `me` of its output, RAGGED_FILL full
        rows = v.shape[0] // ROW // n
        filled = max(1, int(rows * RAGGED_FILL))
        me = jax.lax.axis_index("x").astype(jnp.int32)
        q = jnp.arange(n, dtype=jnp.int32)
        sizes = jnp.full((n,), filled, jnp.int32)
        out = jaccl.ragged_all_to_all(v.reshape(-1, ROW), jnp.zeros((n * rows, ROW), v.dtype),
                                      q * rows, sizes, jnp.full((n,), me * rows, jnp.int32),
                                      sizes, axis_name="x")
        return out.reshape(v.shape)

    def halved(fn):
        return lambda v: fn(v * 0.5)

    records = []
    for op in args.ops.split(","):
        for nbytes in parse_sizes(args.sizes):
            # Elements per device: S for all_reduce and reduce_scatter, S/n for all_gather.
            per_device = nbytes // 4 // (n if op == "all_gather" else 1)
            per_device -= per_device % (n * ROW if op == "ragged_all_to_all" else n)
            for impl in args.impls.split(","):
                fn = ops_for(impl).get(op)
                if fn is None:
                    continue
                if args.operand == "intermediate" and impl != "local":
                    fn = halved(fn)
                donate = (0,) if args.donate == "yes" and (op in ("all_reduce", "ppermute") or (
                    impl == "local" and op != "all_gather")) else ()
                f = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                          check_vma=False), donate_argnums=donate)
                x = jax.make_array_from_callback(
                    (n * per_device,), sharding, lambda i: np.zeros(n * per_device, np.float32)[i])
                reps = iterations(nbytes, args.budget_mb << 20)
                times = []
                timed_engine = args.engine_time and impl in ENGINE_IMPLS
                for i in range(reps + 3):
                    if timed_engine and i == 3:
                        _ext.engine.keep_call_times(True)  # from the first timed call
                    start = time.perf_counter()
                    y = f(x)
                    y.block_until_ready()
                    if i >= 3:
                        times.append(time.perf_counter() - start)
                    if donate:
                        x = y
                record = {"impl": impl, "op": op, "bytes": nbytes, "ranks": n,
                          "median_s": float(np.median(times)), "min_s": float(np.min(times)),
                          "iters": reps}
                if timed_engine:
                    kept = _ext.engine.take_call_times()
                    _ext.engine.keep_call_times(False)
                    engine = engine_median(kept, reps)
                    if engine is not None:
                        record["engine_median_s"] = engine
                records.append(record)
                del x, y
    if index == 0:
        with open(args.output, "w") as f:
            json.dump(records, f)


if __name__ == "__main__":
    main()
