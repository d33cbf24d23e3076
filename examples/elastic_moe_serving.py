"""MoE serving that goes on without a lost expert rank, run with jaccl-run --keep-going.

    jaccl-run -n 3 --keep-going --xla-collectives gloo -- \
        python examples/elastic_moe_serving.py --kill-at 3

Every process serves its own requests (TOKENS tokens a step) through an expert-parallel MoE
layer: EXPERTS experts (each a matrix) split over the job's devices as it started, each device
holding its own experts' weights, dispatched dropless and applied with jax.lax.ragged_dot.
When a process is lost its experts are gone, and they cannot move (weights too large to
reload, or a layout fixed at deployment): the survivors go on over a mesh of the live devices
with `moe_dispatch(..., lost_ranks=...)`, the ranks of the layout that are gone. Pairs routed
to a lost expert are dropped before anything moves (their router weight is not spread over
the others) and counted in `handle.lost`. Each step runs inside JAX's
`multihost_utils.live_devices(...)` (recoverability on before jax.distributed starts), as in
examples/elastic_data_parallel.py; a step that failed (the collective in flight when a process
died) is served again over the survivors. Every process checks every step's outputs against
the same layer computed with numpy on its host, and prints how many of its pairs went to lost
experts.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import jax

jax.config.update("jax_enable_recoverability", True)  # before jax.distributed starts

import jax_jaccl.distributed  # noqa: E402

process_index, process_count = jax_jaccl.distributed.initialize()

import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import jax_jaccl as jaccl  # noqa: E402

AXIS = "expert"
TOKENS, HIDDEN, TOPK = 16, 32, 2   # per device and step
EXPERTS_PER_RANK = 2
RETRIES = 3


def experts(num_experts):
    """Every expert's matrix [E, H, H] (a deployment loads each rank's own)."""
    rng = np.random.default_rng(1234)
    return (rng.normal(size=(num_experts, HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32)


def requests(step: int, rank: int, num_experts: int):
    """Rank `rank`'s tokens of a step, their experts and router weights."""
    rng = np.random.default_rng((step, rank))
    x = rng.normal(size=(TOKENS, HIDDEN)).astype(np.float32)
    idx = np.stack([rng.choice(num_experts, TOPK, replace=False) for _ in range(TOKENS)])
    w = rng.dirichlet(np.ones(TOPK), size=TOKENS).astype(np.float32)
    return x, idx.astype(np.int32), w


def serve(mesh, num_experts, lost):
    """The layer over `mesh`, the layout's ranks `lost` gone: (out [T, H], pairs to lost
    experts [E]) per device."""
    def layer(x, idx, w, weights):
        recv, count, handle = jaccl.moe_dispatch(x, idx, w, num_experts=num_experts,
                                                 dropless=True, axis_name=AXIS, lost_ranks=lost)
        y = jax.lax.ragged_dot(recv, weights[0], group_sizes=count)
        return jaccl.moe_combine(y, handle, w, axis_name=AXIS), handle.lost[None]
    return jax.jit(jax.shard_map(layer, mesh=mesh, in_specs=(P(AXIS),) * 4,
                                 out_specs=(P(AXIS), P(AXIS))))


def expected(step, rank, num_experts, lost, all_weights):
    """The layer for one rank's tokens, with numpy: lost experts' pairs contribute nothing."""
    x, idx, w = requests(step, rank, num_experts)
    out = np.zeros_like(x)
    for k in range(TOPK):
        alive = ~np.isin(idx[:, k] // EXPERTS_PER_RANK, lost)
        y = np.einsum("th,thg->tg", x, all_weights[idx[:, k]])
        out += np.where(alive[:, None], w[:, k, None] * y, 0)
    return out


def on_mesh(mesh, rows_of_rank, ranks):
    """The global array [n * rows, ...] whose block i is rows_of_rank(ranks[i])."""
    blocks = [rows_of_rank(r) for r in ranks]
    whole = np.concatenate(blocks)
    return jax.make_array_from_callback(whole.shape, NamedSharding(mesh, P(AXIS)),
                                        lambda i: whole[i])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="steps to serve (default 6)")
    parser.add_argument("--kill-at", type=int, default=-1,
                        help="the step at which process --who kills itself (default: none)")
    parser.add_argument("--who", type=int, default=-1,
                        help="the process that dies (default: the last)")
    args = parser.parse_args()
    layout = jax.devices()                   # the layout's ranks: the devices as the job started
    num_experts = EXPERTS_PER_RANK * len(layout)
    all_weights = experts(num_experts)
    victim = args.who if args.who >= 0 else process_count - 1
    step, tries, compiled = 0, 0, {}
    while step < args.steps:
        try:
            with multihost_utils.live_devices(jax.devices()) as live:
                if not any(d.process_index == process_index for d in live):
                    sys.exit("JAX's coordination service no longer counts this process live "
                             "(its heartbeats came later than JACCL_HEARTBEAT_TIMEOUT allows: "
                             "a stalled machine?)")
                if step == args.kill_at and process_index == victim:
                    os.kill(os.getpid(), signal.SIGKILL)
                ranks = [r for r, d in enumerate(layout) if d in live]  # the layout's order
                lost = tuple(r for r in range(len(layout)) if r not in ranks)
                mesh = Mesh(np.array([layout[r] for r in ranks]), (AXIS,))
                if lost not in compiled:
                    compiled[lost] = serve(mesh, num_experts, lost)
                x, idx, w = (on_mesh(mesh, lambda r, i=i: requests(step, r, num_experts)[i], ranks)
                             for i in range(3))
                weights = on_mesh(mesh, lambda r: all_weights[r * EXPERTS_PER_RANK:
                                                              (r + 1) * EXPERTS_PER_RANK][None], ranks)
                out, gone = compiled[lost](x, idx, w, weights)
                results = [(ranks[(s.index[0].start or 0) // TOKENS], np.asarray(s.data))
                           for s in out.addressable_shards]
                lost_pairs = int(sum(np.asarray(s.data).sum() for s in gone.addressable_shards))
        except Exception as e:  # noqa: BLE001 - a lost process: serve the step over the survivors
            tries += 1
            if tries > RETRIES:
                raise
            print(f"step {step} failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                  "serving it again over the live devices", flush=True)
            continue
        for rank, got in results:
            np.testing.assert_allclose(got, expected(step, rank, num_experts, lost, all_weights),
                                       rtol=1e-5, atol=1e-5, err_msg=f"step {step} rank {rank}")
        print(f"step {step}: served {TOKENS * len(results)} tokens on {len(ranks)} devices, lost "
              f"experts of ranks {list(lost)}, {lost_pairs} of this process's pairs dropped; "
              "outputs checked", flush=True)
        step, tries = step + 1, 0
    print("FINAL served", flush=True)


if __name__ == "__main__":
    main()
