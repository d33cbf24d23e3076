"""Under Open MPI no hostfile is needed: jax_jaccl.distributed.initialize() lets
jax.distributed.initialize() read mpirun's environment, and jaccl bootstraps from JAX. With
the variables `jaccl-info --xla-collectives-env` prints (docs/xla-collectives.md's one line), the
collectives XLA emits run on jaccl there too (Open MPI starts the processes; no MPI library
carries anything)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).parents[1] / "workers" / "faults.py"


NEEDS_MPIRUN = pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed "
                                  "(apt-get install openmpi-bin; .ci/run installs it)")


def mpirun(*command, env=None):
    cmd = ["mpirun", "-n", "2", "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    full_env = dict(os.environ)  # PYTHONPATH has tests/support (tests/conftest.py)
    for key in [k for k in full_env if k.startswith("JACCL_") and k != "JACCL_TIMEOUT"]:
        del full_env[key]  # nothing from jaccl-run: Open MPI's variables only
    full_env.update(env or {})
    done = subprocess.run(cmd + [sys.executable, *map(str, command)], capture_output=True,
                          text=True, timeout=180, env=full_env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@NEEDS_MPIRUN
def test_job_started_by_mpirun():
    out = mpirun(WORKER, "normal")
    assert out.count("FINISHED") == 2
    assert "STARTED 0 2" in out and "STARTED 1 2" in out


@NEEDS_MPIRUN
def test_xla_collectives_on_jaccl_under_mpirun():
    words = subprocess.run([sys.executable, "-m", "jax_jaccl.info", "--xla-collectives-env"],
                           capture_output=True, text=True, check=True).stdout.split()
    out = mpirun(Path(__file__).parents[1] / "workers" / "xla_collectives.py", "jaccl",
                 env=dict(word.split("=", 1) for word in words))
    assert out.count("XLA COLLECTIVES jaccl CHECKED 23 ON 2 x 1") == 2, out[-3000:]
