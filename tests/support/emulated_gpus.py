"""jaccl's CUDA handlers over emulated GPUs (tests/builds/cuda_emulation), in a JAX process
of CPU devices: the module that tests/builds/cuda_emulation/build.py builds is loaded beside
the real package, its handlers are registered for the CPU platform under their own names, and
jaccl's lowering is pointed at them.

Contract: install(module_path, path, gpus_per_process) makes this process's first
`gpus_per_process` CPU devices (default all) its GPUs on the "peer" or "staged" path; called by
jax_on_emulated_gpus.py and, when JACCL_TEST_EMULATED_CUDA names a module, by the process
workers (tests/workers/common.py).
"""

from __future__ import annotations

import importlib.util
import os
import types


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

    # _ext: the CPU handlers
    from jax_jaccl import _bootstrap as bootstrap, _compat, _cuda_peers, _ext

    emulated = load_emulated_module(module_path)
    emulated.set_engine(_ext.engine.engine_api(), _ext.engine.engine_moe_api(),
                        _ext.engine.engine_abort_api())
    # jaccl_<op> -> the emulation's entry point for it (build.py)
    for name, entry in emulated.registrations().items():
        jax.ffi.register_ffi_target("emulated_" + name, entry, platform="cpu")
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
