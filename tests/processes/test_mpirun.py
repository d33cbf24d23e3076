"""Under Open MPI no hostfile is needed: jax_jaccl.distributed.initialize() lets
jax.distributed.initialize() read mpirun's environment, and jaccl bootstraps from JAX."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "faults.py"


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed "
                    "(apt-get install openmpi-bin; .ci/run installs it)")
def test_job_started_by_mpirun():
    cmd = ["mpirun", "-n", "2", "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1] / "support"))
    for key in [k for k in env if k.startswith("JACCL_") and k != "JACCL_TIMEOUT"]:
        del env[key]  # nothing from jaccl-run: Open MPI's variables only
    done = subprocess.run(cmd + [sys.executable, str(WORKER), "normal"], capture_output=True,
                          text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("FINISHED") == 2
    assert "STARTED 0 2" in done.stdout and "STARTED 1 2" in done.stdout
