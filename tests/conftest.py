"""Test set-up shared by every folder: this pytest process gets 4 CPU devices (one process x 4
devices layout); the processes tests start find tests/support as the pytest process does
(pyproject's `pythonpath`). A process of a jax_processes job (tests/plugin) keeps the devices
its job gave it."""

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
