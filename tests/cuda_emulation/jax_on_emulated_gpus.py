"""The GPU test batteries (tests/cuda) through jaccl's CUDA handlers, without a GPU: the
_jaccl_cuda module built over emulated GPUs (build.py's build_module) is loaded beside the
real package, its handlers are registered for the CPU platform under their own names, and
jaccl's lowering is pointed at them. CPU devices 0-3 of this process then play 4 GPUs of one
host (workspaces, peer registry and bootstrap's set-up as on a GPU machine) and devices 4-7
compute the jax.lax reference.

Usage: python jax_on_emulated_gpus.py MODULE_PATH {collectives,moe,bad-expert} [--path peer|staged]
Prints `OK ...` lines and `PATHS peer=P staged=S`; exits non-zero on any mismatch.
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
sys.path.insert(0, str(HERE.parent / "cuda"))
sys.path.insert(0, str(HERE.parent / "unit"))

GPUS = 4


def load_emulated_module(path: str):
    spec = importlib.util.spec_from_file_location("emulated_gpus._jaccl_cuda", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install(emulated, module_path: str, path: str):
    """Routes every jaccl custom call to the emulated CUDA handlers and sets up the GPUs as
    bootstrap does on a GPU machine. Returns the devices that play GPUs and the reference."""
    import jax

    import jax_jaccl  # noqa: F401  (registers the CPU handlers, builds the engine)
    from jax_jaccl import _compat, _cuda_peers, _ext, bootstrap

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
    _ext.cuda_engine = emulated  # for the path counts the batteries check
    cpus = jax.devices("cpu")
    gpus, reference = cpus[:GPUS], cpus[GPUS:2 * GPUS]
    world = bootstrap.init()
    emulated.set_device_ids([(int(d.id), int(d.id)) for d in gpus])
    if path != "staged":  # bootstrap's peer set-up, with CPU devices standing in for GPUs
        stand_ins = [types.SimpleNamespace(local_hardware_id=int(d.id), id=int(d.id)) for d in gpus]
        _cuda_peers.cuda_engine = emulated
        _cuda_peers.local_gpus = lambda: stand_ins
        _cuda_peers.setup(world.process_index, [{"pid": os.getpid(), "gpus": GPUS}], world.hosts,
                          "emulated", world.settings.timeout_s)
    return gpus, reference


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("module")
    parser.add_argument("suite", choices=["collectives", "moe", "bad-expert"])
    parser.add_argument("--path", choices=["peer", "staged"], default="peer")
    args = parser.parse_args()
    os.environ["JACCL_CUDA_PATH"] = args.path
    os.environ.setdefault("JACCL_CUDA_BUFFER_MB", "1")  # small: messages go in chunks
    os.environ["JACCL_EMULATED_GPUS"] = str(GPUS)
    import jax

    jax.config.update("jax_num_cpu_devices", 2 * GPUS)
    emulated = load_emulated_module(args.module)
    gpus, reference = install(emulated, args.module, args.path)

    import gpu_collectives
    import gpu_moe

    if args.suite == "collectives":
        gpu_collectives.check_all(devices=gpus, reference=reference, lax_on_devices=False)
    elif args.suite == "moe":
        gpu_moe.check_moe(devices=gpus, reference=reference)
    else:
        gpu_moe.provoke_bad_expert(devices=gpus)
        return
    gpu_collectives.expect_path(args.path)


if __name__ == "__main__":
    main()
