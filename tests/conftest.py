"""Test set-up shared by every folder: this pytest process gets 4 CPU devices (one process x 4
devices layout); the processes tests start find tests/support as the pytest process does
(pyproject's `pythonpath`). A process of a jax_processes job (tests/plugin) keeps the devices
its job gave it. The processes the suite starts compile without LLVM's optimisations (below)."""

import os
from pathlib import Path

os.environ.setdefault("JACCL_TIMEOUT", "60")
# The processes tests start (scripts, jaccl-run jobs) import tests/support as pytest does.
_SUPPORT = str(Path(__file__).parent / "support")
_PATHS = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if _SUPPORT not in _PATHS:
    os.environ["PYTHONPATH"] = os.pathsep.join([_SUPPORT, *_PATHS])

import jax  # noqa: E402

if not os.environ.get("JACCL_PYTEST_JOB_DIR"):
    jax.config.update("jax_num_cpu_devices", 4)

# The processes the suite starts (jobs, scripts, jaccl-run) compile XLA's programs without
# LLVM's optimisations: LLVM was a quarter of a 4-process battery's CPU time (the 4x1 plugin
# battery: 33 -> 24 s of CPU, 19 -> 15 s). The custom calls, their buffers and XLA's HLO passes
# are the same either way. The pytest process has read its own XLA flags before the variable
# changes, so it, and every in-process check, keeps XLA's defaults: the code users get.
# pytest-xdist's workers inherit the changed variable: each reads the flags pytest started
# with (kept in _OWN_FLAGS) before it changes the variable again for its own children.
_FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
_OWN_FLAGS = "JACCL_PYTEST_OWN_XLA_FLAGS"
if not os.environ.get("JACCL_PYTEST_JOB_DIR"):
    _own = os.environ.setdefault(_OWN_FLAGS, os.environ.get("XLA_FLAGS", ""))
    if "xla_backend_optimization_level" not in _own:
        from jax._src.lib import xla_client  # noqa: E402

        os.environ["XLA_FLAGS"] = _own
        xla_client.CompileOptions()  # parses XLA_FLAGS for this process, once
        os.environ["XLA_FLAGS"] = f"{_own} {_FAST_COMPILE}".strip()
