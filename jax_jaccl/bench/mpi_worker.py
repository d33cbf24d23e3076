"""Runs under mpirun: times mpi4jax (jit-compiled, on each process's CPU device) and raw
mpi4py on numpy arrays, with the same sizes and iteration counts as the jaccl worker; rank 0
writes the JSON records. mpi4jax has no reduce_scatter; mpi4py's Reduce_scatter_block is the
MPI one."""

from __future__ import annotations

import argparse
import json
import time


def _result(out):
    """mpi4jax < 0.5 returns (result, token)."""
    return out[0] if isinstance(out, tuple) else out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--ops", required=True)
    parser.add_argument("--impls", required=True, help="comma list of mpi4jax, mpi")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    import numpy as np
    from mpi4py import MPI

    from jax_jaccl.bench.sizes import iterations, parse_sizes

    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    records = []

    def timed(call, reps):
        times = []
        for i in range(reps + 3):
            comm.Barrier()
            start = time.perf_counter()
            call()
            if i >= 3:
                times.append(time.perf_counter() - start)
        return times

    impls = args.impls.split(",")
    if "mpi4jax" in impls:
        import jax
        import mpi4jax

    for op in args.ops.split(","):
        for nbytes in parse_sizes(args.sizes):
            count = nbytes // 4 // (n if op == "all_gather" else 1)
            count -= count % n
            reps = iterations(nbytes)
            for impl in impls:
                if impl == "mpi":
                    # Both buffers written before timing: an untouched np.zeros may be the
                    # kernel's shared zero page, which reads from cache (jaccl's input is
                    # written memory), and whether it is depends on the heap's history.
                    send = np.full(count, rank + 1, np.float32)
                    recv = np.ones(count * n if op == "all_gather" else
                                   count // n if op == "reduce_scatter" else count, np.float32)
                    call = {"all_reduce": lambda: comm.Allreduce(send, recv, op=MPI.SUM),
                            "reduce_scatter": lambda: comm.Reduce_scatter_block(send, recv, op=MPI.SUM),
                            "all_gather": lambda: comm.Allgather(send, recv)}[op]
                elif op == "reduce_scatter":
                    continue  # mpi4jax has none
                else:
                    x = jax.numpy.zeros(count, np.float32)
                    if op == "all_reduce":
                        f = jax.jit(lambda v: _result(mpi4jax.allreduce(v, op=MPI.SUM, comm=comm)))
                    else:
                        f = jax.jit(lambda v: _result(mpi4jax.allgather(v, comm=comm)))
                    call = lambda f=f, x=x: jax.block_until_ready(f(x))  # noqa: E731
                times = timed(call, reps)
                records.append({"impl": impl, "op": op, "bytes": nbytes, "ranks": n,
                                "median_s": float(np.median(times)), "min_s": float(np.min(times)),
                                "iters": reps})
    if rank == 0:
        with open(args.output, "w") as f:
            json.dump(records, f)


if __name__ == "__main__":
    main()
