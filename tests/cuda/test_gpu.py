"""The GPU suite as pytest sees it (skipped, with the reason, where JAX has no GPU): the
collectives in this process's GPUs, and across 2 processes sharing one GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_collectives import gpu_reason, test_collectives_on_gpu  # noqa: F401

HERE = Path(__file__).parent


def test_two_processes_share_a_gpu():
    reason = gpu_reason()
    if reason:
        pytest.skip(reason)
    env = dict(os.environ, XLA_PYTHON_CLIENT_MEM_FRACTION="0.3", JACCL_TIMEOUT="60")
    done = subprocess.run([sys.executable, "-m", "jax_jaccl.launch", "-n", "2", "--",
                           sys.executable, str(HERE / "gpu_collectives.py"), "--worker"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert done.stdout.count("OK ") == 2
