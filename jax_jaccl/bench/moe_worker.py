"""Runs inside a jaccl-run job: times MoE dispatch and combine, jaccl against a pure-JAX
baseline (lax.all_to_all of per-destination blocks padded to a fixed capacity), and has
rank 0 write one JSON record per measurement.

Bytes are counted as DeepEP does: one row of H elements per routed (token, expert) pair,
split by whether the expert's rank shares the sender's host (intra) or not (inter); every
rank reports its own time and the record keeps each rank's median (`per_rank_s`).

Each program is timed once every process's memory has stopped growing (warm_up): jaccl-run keeps
what a process frees (JACCL_KEEP_FREED_MEMORY), so the heap grows over a program's first calls
until every buffer they take has a place, and a call that grows it faults fresh pages in (at T =
4096, H = 4096, 2 processes on this 2-core machine: such a dispatch took 0.55-1.0 s against
30-40 ms for one that did not). Timed from the first call, the medians measured that growth
instead of the op; after the warm-up a call can still grow it (0-3 of 35 in loops of 40 here),
which the median skips where a mean would not.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import jax_jaccl.distributed


class Sync:
    """Barriers and gathers through JAX's coordination service (its own network, and no XLA
    collective that could meet a jaccl one in a different order)."""

    def __init__(self, index: int, count: int):
        from jax_jaccl import _compat

        self.client = _compat.distributed_state().client
        self.index, self.count, self.n = index, count, 0

    def barrier(self) -> None:
        self.n += 1
        if self.client is not None:
            self.client.wait_at_barrier(f"jaccl-bench-moe-{self.n}", 600_000)

    def gather(self, value: float) -> list:
        self.n += 1
        if self.client is None:
            return [value]
        self.client.key_value_set(f"jaccl-bench-moe/{self.n}/{self.index}", json.dumps(value))
        return [json.loads(self.client.blocking_key_value_get(f"jaccl-bench-moe/{self.n}/{p}", 600_000))
                for p in range(self.count)]


# Warm-up rounds at most: a program that still grows the heap after them is timed anyway.
MAX_WARM_UP = 40
# A round that raised no process's peak resident memory by more than GROWTH_KIB is steady; the
# warm-up ends after STEADY_ROUNDS steady rounds in a row (the heap can stay as it is for a few
# rounds and then grow again).
GROWTH_KIB = 1024
STEADY_ROUNDS = 4


def warm_up(sync, call) -> int:
    """Runs `call` (one round of a program) until STEADY_ROUNDS rounds in a row raised no
    process's peak resident memory by more than GROWTH_KIB, MAX_WARM_UP rounds at most;
    returns the rounds run."""
    steady = 0
    for rounds in range(1, MAX_WARM_UP + 1):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        call()
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        steady = steady + 1 if max(sync.gather(grown)) <= GROWTH_KIB else 0
        if steady == STEADY_ROUNDS:
            return rounds
    return MAX_WARM_UP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--hidden", default="1024,4096")
    parser.add_argument("--experts", default="8,32")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--capacity-factor", type=float, default=1.5)
    parser.add_argument("--impls", default="jaccl,jaccl_fp8,lax,bound")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    index, count = jax_jaccl.distributed.initialize()

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jax_jaccl as jaccl

    world = jaccl.init()
    sync = Sync(index, count)
    n = len(jax.devices())
    mesh = jax.make_mesh((n,), ("ep",))
    spec = NamedSharding(mesh, P("ep"))
    T, K = args.tokens, args.k
    host_of_rank = [world.hosts[d.process_index] for d in mesh.devices.flat]
    records = []

    for hidden in map(int, args.hidden.split(",")):
        for experts in map(int, args.experts.split(",")):
            E_loc = experts // n
            rng = np.random.default_rng(0)
            idx = np.stack([rng.choice(experts, size=K, replace=False)
                            for _ in range(n * T)]).astype(np.int32)
            w = rng.random(size=(n * T, K)).astype(np.float32)
            x = rng.normal(size=(n * T, hidden)).astype(jnp.bfloat16)
            per_expert = n * T * K / experts
            capacity = int(np.ceil(per_expert * args.capacity_factor))       # jaccl: whole expert
            block = int(np.ceil(T * K / experts * args.capacity_factor))     # baseline: per source
            dest_rank = idx // E_loc
            src_rank = np.repeat(np.arange(n), T)[:, None]
            same_host = np.vectorize(lambda s, d: host_of_rank[s] == host_of_rank[d])(src_rank, dest_rank)
            intra_bytes = int(same_host.sum()) * hidden * 2 // n   # per rank, bf16
            inter_bytes = int((~same_host).sum()) * hidden * 2 // n

            def put(a):
                return jax.make_array_from_callback(a.shape, spec, lambda i: a[i])

            xs, ids, ws = put(x), put(idx), put(w)

            def jaccl_programs(fp8=False):
                def dispatch(x, i, w):
                    recv, _, handle = jaccl.moe_dispatch(x, i, w, num_experts=experts,
                                                         capacity=capacity, axis_name="ep",
                                                         fp8=fp8)
                    return recv, handle

                def combine(y, handle, w):
                    return jaccl.moe_combine(y, handle, w, axis_name="ep")

                handle_spec = jaccl.MoeHandle(*([P("ep")] * len(jaccl.MoeHandle._fields)))
                recv_spec = jaccl.Fp8Rows(P("ep"), P("ep")) if fp8 else P("ep")
                d = jax.jit(jax.shard_map(dispatch, mesh=mesh, in_specs=(P("ep"),) * 3,
                                          out_specs=(recv_spec, handle_spec)))
                c = jax.jit(jax.shard_map(combine, mesh=mesh, in_specs=(P("ep"), handle_spec, P("ep")),
                                          out_specs=P("ep")))
                return d, c

            def lax_programs():
                def slots(i):  # per (token, k): position in its (destination expert) block
                    flat = i.reshape(-1)
                    one_hot = flat[:, None] == jnp.arange(experts)[None, :]
                    pos = (jnp.cumsum(one_hot, axis=0) - 1)[jnp.arange(flat.shape[0]), flat]
                    return flat, pos

                def dispatch(x, i, w):
                    flat, pos = slots(i)
                    ok = pos < block
                    buf = jnp.zeros((experts, block + 1, hidden), x.dtype)
                    tok = jnp.repeat(jnp.arange(T), K)
                    buf = buf.at[flat, jnp.where(ok, pos, block)].set(x[tok])[:, :block]
                    buf = buf.reshape(n, E_loc, block, hidden)
                    recv = jax.lax.all_to_all(buf, "ep", 0, 0, tiled=True)  # [n, E_loc, block, H]
                    return recv, (flat, pos)

                def combine(recv, routing, w):
                    flat, pos = routing
                    back = jax.lax.all_to_all(recv, "ep", 0, 0, tiled=True).reshape(experts, block, hidden)
                    ok = pos < block
                    rows = back[flat, jnp.minimum(pos, block - 1)].astype(jnp.float32)
                    rows = rows * jnp.where(ok, w.reshape(-1), 0.0)[:, None]
                    return rows.reshape(T, K, hidden).sum(1).astype(recv.dtype)

                d = jax.jit(jax.shard_map(dispatch, mesh=mesh, in_specs=(P("ep"),) * 3,
                                          out_specs=(P("ep"), (P("ep"), P("ep")))))
                c = jax.jit(jax.shard_map(combine, mesh=mesh,
                                          in_specs=(P("ep"), (P("ep"), P("ep")), P("ep")),
                                          out_specs=P("ep")))
                return d, c

            def bounds():
                """What the ranks' memory allows, no communication, every rank at once: for
                dispatch a plain copy of the bytes it writes per rank (T * K rows of H bf16,
                np.copyto into a preallocated buffer); for combine the same math fused by XLA,
                out[t] = sum_k w[t, k] * y[idx[t, k]] in float32 over T * K distinct rows."""
                rows = np.resize(x, (T * K, hidden))                   # bf16, T * K rows
                copy_to = np.empty_like(rows)
                dev = jax.local_devices()[0]
                y = jax.device_put(rows, dev)
                pick = jax.device_put(rng.permutation(T * K).reshape(T, K).astype(np.int32), dev)
                weights = jax.device_put(w[:T], dev)

                @jax.jit
                def fused(y, pick, weights):  # k by k: XLA:CPU fuses it into one loop (a
                    # [T, K, H] gather then a sum over k is 10-20x slower there)
                    acc = jnp.zeros((T, hidden), jnp.float32)
                    for k in range(K):
                        acc = acc + weights[:, k, None] * y[pick[:, k]].astype(jnp.float32)
                    return acc.astype(y.dtype)

                def round_():
                    np.copyto(copy_to, rows)
                    jax.block_until_ready(fused(y, pick, weights))

                rounds = warm_up(sync, round_)
                times = {"dispatch": [], "combine": []}
                for _ in range(args.iters):
                    sync.barrier()
                    start = time.perf_counter()
                    np.copyto(copy_to, rows)
                    times["dispatch"].append(time.perf_counter() - start)
                    sync.barrier()
                    start = time.perf_counter()
                    jax.block_until_ready(fused(y, pick, weights))
                    times["combine"].append(time.perf_counter() - start)
                return times, rounds

            for impl in args.impls.split(","):
                if impl == "bound":
                    times, rounds = bounds()
                    for op, ts in times.items():
                        per_rank = sync.gather(float(np.median(ts)))
                        records.append({"impl": "bound", "op": op, "hidden": hidden,
                                        "experts": experts, "tokens": T, "k": K, "ranks": n,
                                        "warm_up": rounds,
                                        "per_rank_s": [float(v) for v in np.ravel(per_rank)],
                                        "median_s": float(np.max(per_rank))})
                    continue
                # jaccl_fp8: dispatch alone (combine is jaccl's), rows quantised on the send
                # path; its bytes are what travels: H e4m3 values + H / 128 float32 scales a row
                fp8 = impl == "jaccl_fp8"
                if fp8 and hidden % 128:
                    continue  # FP8 rows have a scale per 128 channels
                d, c = jaccl_programs(fp8) if impl.startswith("jaccl") else lax_programs()
                last = []  # the last round's dispatch: (recv, handle)

                def round_():
                    last[:] = d(xs, ids, ws)
                    jax.block_until_ready(last[0] if fp8 else c(*last, ws))

                rounds = warm_up(sync, round_)
                recv, handle = last
                times = {"dispatch": []} if fp8 else {"dispatch": [], "combine": []}
                for _ in range(args.iters):
                    sync.barrier()
                    start = time.perf_counter()
                    recv, handle = d(xs, ids, ws)
                    jax.block_until_ready(recv)
                    times["dispatch"].append(time.perf_counter() - start)
                    if fp8:
                        continue
                    sync.barrier()
                    start = time.perf_counter()
                    jax.block_until_ready(c(recv, handle, ws))
                    times["combine"].append(time.perf_counter() - start)
                row_scale = (hidden + 4 * hidden // 128) / (2 * hidden) if fp8 else 1.0
                for op, ts in times.items():
                    per_rank = sync.gather(float(np.median(ts)))
                    records.append({"impl": "jaccl" if fp8 else impl,
                                    "op": "dispatch fp8" if fp8 else op, "hidden": hidden,
                                    "experts": experts,
                                    "tokens": T, "k": K, "ranks": n, "capacity": capacity,
                                    "block": block, "warm_up": rounds,
                                    "intra_bytes": int(intra_bytes * row_scale),
                                    "inter_bytes": int(inter_bytes * row_scale),
                                    "per_rank_s": [float(v) for v in np.ravel(per_rank)],
                                    "median_s": float(np.max(per_rank))})
                del recv, handle
    if index == 0:
        with open(args.output, "w") as f:
            json.dump(records, f)


if __name__ == "__main__":
    main()
