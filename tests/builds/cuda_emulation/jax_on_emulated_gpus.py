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

install() is also what tests/processes/workers/common.py calls when JACCL_TEST_EMULATED_CUDA
names a module, so that the fault workers run on emulated GPUs.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "support"))  # also run as a script

GPUS = 4  # in one process


def load_emulated_module(path: str):
    spec = importlib.util.spec_from_file_location("emulated_gpus._jaccl_cuda", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install(module_path: str, path: str, gpus_per_process: int | None = None):
    """Routes every jaccl custom call to the emulated CUDA handlers and starts jaccl with the
    first `gpus_per_process` local CPU devices (default all) as this process's GPUs. Call after
    JAX knows its devices (jax.distributed.initialize) and before any jaccl call. Returns the
    local devices that play GPUs."""
    os.environ["JACCL_CUDA_PATH"] = path
    import jax

    from jax_jaccl import _bootstrap as bootstrap, _compat, _cuda_peers, _ext  # _ext: the CPU handlers

    emulated = load_emulated_module(module_path)
    emulated.set_engine(_ext.engine.engine_api(), _ext.engine.engine_moe_api(),
                        _ext.engine.engine_abort_api())
    library = ctypes.CDLL(module_path)  # the module's own handle: it is loaded already
    for name in emulated.registrations():  # jaccl_<op> -> entry point emulated_jaccl_cuda_<op>
        entry = getattr(library, "emulated_jaccl_cuda_" + name[len("jaccl_"):])
        jax.ffi.register_ffi_target("emulated_" + name, jax.ffi.pycapsule(entry), platform="cpu")
    custom_call = _compat.custom_call

    def to_emulated(target, *args, **kwargs):
        return custom_call("emulated_" + target if target.startswith("jaccl_") else target,
                           *args, **kwargs)

    _compat.custom_call = to_emulated
    local = jax.local_devices()
    gpus = local[:gpus_per_process] if gpus_per_process else local
    os.environ["JACCL_EMULATED_GPUS"] = str(len(gpus))  # what cudaGetDeviceCount says
    # CPU ordinals are global device ids: they name the emulated GPUs.
    emulated.set_device_ids([(int(d.id), int(d.id)) for d in gpus])
    _ext.cuda_engine = bootstrap.cuda_engine = emulated  # path counts; failures at exit
    stand_ins = [types.SimpleNamespace(local_hardware_id=int(d.id), id=int(d.id)) for d in gpus]
    _cuda_peers.cuda_engine = emulated
    _cuda_peers.local_gpus = lambda: [] if path == "staged" else stand_ins
    bootstrap.init()  # its GPU set-up (_cuda_peers.setup) now sees the stand-ins
    return gpus


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
