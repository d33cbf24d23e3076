"""A GPU check in a process of its own, or one process of a GPU job (tests/cuda/test_gpu.py):
`python tests/workers/gpu.py CHECK [--worker] [--expect-path peer|staged] [--iters N]`.

CHECK is one of
- collectives: the collective battery (tests/support/gpu_collectives.py), `OK <checks> ...`;
- moe: MoE dispatch and combine (tests/support/gpu_moe.py), `OK <checks> ...`;
- bad-expert: a token routed to expert 99, `RAISED <message>` (the GPU context is lost after
  it: run it alone);
- streams: a jaccl all_reduce on a GPU stream of its own (tests/support/gpu_streams.py, a job
  only), `STREAMS ...` and `OK streams`.
With --worker it is one process of a jaccl-run job, whose processes share the machine's GPUs
(jax_jaccl.distributed.initialize, with as many local CPU devices as the references need);
without, this process alone. --expect-path then checks which path the handlers took. Where JAX
has no GPU it prints `SKIP: <reason>` and exits 0."""

from __future__ import annotations

import argparse
import os

from gpu_collectives import check_all, expect_path, gpu_reason, reference_devices
from gpu_moe import check_moe, provoke_bad_expert
from gpu_streams import check_streams

CPU_DEVICES = reference_devices(8)  # jax.lax's (or the MoE model's) reference devices


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", choices=["collectives", "moe", "bad-expert", "streams"])
    parser.add_argument("--worker", action="store_true", help="one process of a jaccl-run job")
    parser.add_argument("--expect-path", choices=["peer", "staged"])
    parser.add_argument("--iters", type=int, default=5, help="rounds timed by the streams check")
    args = parser.parse_args()
    os.environ.setdefault("JACCL_TIMEOUT", "60")
    if args.worker:
        import jax_jaccl.distributed

        _, count = jax_jaccl.distributed.initialize(
            local_devices=None if args.check == "streams" else CPU_DEVICES)
        assert count > 1, "worker started with a single process"
    else:
        import jax

        jax.config.update("jax_num_cpu_devices", CPU_DEVICES)
    reason = gpu_reason()
    if reason:
        print(f"SKIP: {reason}")
        return
    if args.check == "bad-expert":
        provoke_bad_expert()
        return
    {"collectives": check_all, "moe": check_moe,
     "streams": lambda: check_streams(args.iters)}[args.check]()
    if args.expect_path:
        expect_path(args.expect_path)


if __name__ == "__main__":
    main()
