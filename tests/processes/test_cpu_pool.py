"""jaxlib < 0.12.1's CPU pool and several devices in one process: the README quickstart's step,
200 times with jaccl's ops and 200 times with jax.lax's, in one process of 4 CPU devices held
to 2 cores (workers/cpu_pool.py), finishes with the same loss both ways. Without the room
jaccl makes (_cpu_pool: NPROC), such a jaxlib deadlocks there: with NPROC=2 the worker's jaccl
op times out naming the device that never arrived (checked 3 of 3 on jax 0.10.2), and jax.lax's
own rendezvous waits forever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jax_jaccl import _cpu_pool

WORKER = Path(__file__).parents[1] / "workers" / "cpu_pool.py"


@pytest.mark.timeout(150)
def test_four_devices_on_two_cores_run_a_training_loop_both_ways():
    planned = ("NPROC", "XLA_FLAGS", "JAX_NUM_CPU_DEVICES", "JACCL_LOCAL_DEVICES")
    env = {k: v for k, v in os.environ.items() if k not in planned}
    env["JACCL_TIMEOUT"] = "30"
    proc = subprocess.Popen([sys.executable, str(WORKER)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out = proc.communicate(timeout=120)[0]
    except subprocess.TimeoutExpired:
        out = "(no output: killed after 120 s)"
    finally:
        if proc.poll() is None:  # JAX catches SIGTERM (its preemption notifier): SIGKILL
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 0, out[-4000:]
    lines = dict(l.split(" ", 1) for l in out.splitlines() if l.startswith(("NPROC ", "LOSSES ")))
    affected = _cpu_pool.jaxlib_version() < _cpu_pool.FIXED_IN
    assert lines["NPROC"] == (str(_cpu_pool.threads_for(4)) if affected else "unset"), out
    jaccl_loss, lax_loss = lines["LOSSES"].split()
    assert jaccl_loss == lax_loss, out
