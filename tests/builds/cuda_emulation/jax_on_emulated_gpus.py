"""The GPU test batteries (tests/cuda) through jaccl's CUDA handlers, without a GPU: the
_jaccl_cuda module built over emulated GPUs (build.py's build) is loaded beside the
real package, its handlers are registered for the CPU platform under their own names, and
jaccl's lowering is pointed at them. CPU devices then play GPUs of one host: workspaces, IPC
handles through JAX's key-value store, the peer registry and bootstrap's set-up run as on a
GPU machine.

Usage:
  python jax_on_emulated_gpus.py MODULE {collectives,moe,bad-expert,bench} [--path peer|staged]
      one process: CPU devices 0-3 play 4 GPUs, devices 4-7 compute the jax.lax reference
      (bench: jaccl-bench kernels at small sizes, its XLA side on the CPU);
  jaccl-run -n N -- python jax_on_emulated_gpus.py MODULE {collectives,moe} --job [--path ...]
      N processes, the first CPU device of each plays its GPU, the next N the reference.
Prints `OK ...` lines and `PATHS peer=P staged=S`; exits non-zero on any mismatch.

tests/support/emulated_gpus.py does the routing (install()); run by hand, give the script
tests/support on PYTHONPATH, as the tests do.
"""

from __future__ import annotations

import argparse
import os

from emulated_gpus import install

GPUS = 4  # in one process


# gpu_collectives.SHAPES with a smaller large one: still two chunks of the 1 MiB buffer below
# (the second partial) for 4-byte types, a third of the elements an emulated GPU thread walks.
EMULATED_SHAPES = [(7,), (65_537,), (6, 40), (512, 640)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("module")
    parser.add_argument("suite", choices=["collectives", "moe", "bad-expert", "bench"])
    parser.add_argument("--path", choices=["peer", "staged"], default="peer")
    parser.add_argument("--job", action="store_true", help="one process of a jaccl-run job")
    args = parser.parse_args()
    os.environ.setdefault("JACCL_CUDA_BUFFER_MB", "1")  # small: messages go in chunks
    import jax

    if args.job:
        import jax_jaccl.distributed

        processes = int(os.environ["JACCL_NUM_PROCESSES"])
        _, count = jax_jaccl.distributed.initialize(local_devices=1 + processes)
        assert count > 1, "worker started with a single process"
        install(args.module, args.path, gpus_per_process=1)
        gpus = [min((d for d in jax.devices() if d.process_index == p), key=lambda d: d.id)
                for p in range(count)]
        reference = jax.local_devices()[1:1 + count]
    else:
        jax.config.update("jax_num_cpu_devices", 2 * GPUS)
        gpus = install(args.module, args.path, gpus_per_process=GPUS)
        reference = jax.local_devices()[GPUS:2 * GPUS]

    import jax.numpy as jnp
    import numpy as np

    import gpu_collectives
    import gpu_moe

    if args.suite == "collectives":
        # Across processes (the IPC-mapped peer path, the staging) a 4-, 2- and 1-byte type:
        # every dtype ran both paths in one process.
        gpu_collectives.check_all(devices=gpus, reference=reference, lax_on_devices=False,
                                  shapes=EMULATED_SHAPES,
                                  types=(np.float32, jnp.bfloat16, np.int8) if args.job else None)
    elif args.suite == "moe":
        # Across processes the point is the IPC-mapped peer path and the staging: the row
        # types, scale formats and dropless cases all ran in one process, so here one 2-byte
        # row type (rows move as bytes), one scale format and one dropless case.
        gpu_moe.check_moe(devices=gpus, reference=reference,
                          dtypes=(jnp.bfloat16,) if args.job else None, slim=args.job)
    elif args.suite == "bad-expert":
        gpu_moe.provoke_bad_expert(devices=gpus)
        return
    else:  # jaccl-bench kernels, small: its code path, not its numbers
        from jax_jaccl.bench import cli

        cpu_devices = jax.devices
        jax.devices = lambda backend=None: cpu_devices(None if backend == "gpu" else backend)
        cli.main(["kernels", "--sizes", "64K", "--operands", "2,4,9", "--iters", "2", "--rounds", "2",
                  "--tokens", "64", "--topk", "3", "--hidden", "136"])
        return
    gpu_collectives.expect_path(args.path)


if __name__ == "__main__":
    main()
