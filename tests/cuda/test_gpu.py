"""The GPU suite (skipped, with the reason, where JAX has no GPU): the collective battery in
this process's GPUs, across 2 processes sharing the machine's GPUs on the peer path (CUDA
IPC, device-memory flags) and on the staged path; the MoE ops likewise; and failures on
the GPU: ranks that
disagree, a killed peer and a stalled peer end in an error on every survivor within the
deadline, never a hung stream, and leave no process behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_collectives import check_all, gpu_reason
from gpu_moe import check_moe

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "multiprocess"))

from harness import clean, run_job  # noqa: E402

pytestmark = pytest.mark.skipif(gpu_reason() is not None, reason=str(gpu_reason()))

# Two processes on one GPU: each takes a slice of its memory, not XLA's default 75%.
SHARED_GPU = {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.25", "JACCL_TIMEOUT": "60"}
FAULT_TIMEOUT = 10


def test_battery_in_this_process():
    assert check_all() > 0


@pytest.mark.parametrize("path, buffer_mb", [("peer", "1"), ("peer", "64"), ("staged", "64")])
def test_battery_in_two_processes(path, buffer_mb):
    """JACCL_CUDA_BUFFER_MB=1 makes the larger messages go through the workspace in chunks."""
    env = dict(os.environ, **SHARED_GPU, JACCL_CUDA_PATH=path, JACCL_CUDA_BUFFER_MB=buffer_mb,
               JACCL_DEBUG="INFO")
    done = subprocess.run([sys.executable, "-m", "jax_jaccl.launch", "-n", "2", "--",
                           sys.executable, str(HERE / "gpu_collectives.py"), "--worker",
                           "--expect-path", path],
                          capture_output=True, text=True, timeout=900, env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, clean(output)[-6000:]
    assert output.count("OK ") == 2, clean(output)[-3000:]
    assert "of 2" in output  # both processes report a job of two


def test_moe_in_this_process():
    assert check_moe() > 0


@pytest.mark.parametrize("path", ["peer", "staged"])
def test_moe_in_two_processes(path):
    """Rows GPU to GPU through the staging areas (peer), or through the CPU engine (staged)."""
    env = dict(os.environ, **SHARED_GPU, JACCL_CUDA_PATH=path)
    done = subprocess.run([sys.executable, "-m", "jax_jaccl.launch", "-n", "2", "--",
                           sys.executable, str(HERE / "gpu_moe.py"), "--worker", "--expect-path",
                           path],
                          capture_output=True, text=True, timeout=900, env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, clean(output)[-6000:]
    assert output.count("OK ") == 2, clean(output)[-3000:]


@pytest.mark.parametrize("path", ["peer", "staged"])
def test_bad_expert_id_is_an_error_on_the_gpu(path):
    env = dict(os.environ, **SHARED_GPU, JACCL_CUDA_PATH=path)
    done = subprocess.run([sys.executable, str(HERE / "gpu_moe.py"), "--bad-expert"],
                          capture_output=True, text=True, timeout=300, env=env)
    output = done.stdout + done.stderr
    assert "RAISED" in output and "NO ERROR" not in output, output[-3000:]
    assert "expert id 99" in output, output[-3000:]


def fault_env(path):
    return {**SHARED_GPU, "JACCL_TIMEOUT": str(FAULT_TIMEOUT), "JACCL_CUDA_PATH": path}


def ended(job, rank):
    """The rank's RAISED message, or its last lines when it died without one."""
    lines = job.values(rank, "RAISED")
    return lines[0] if lines else " | ".join(job.lines(rank)[-5:])


@pytest.mark.parametrize("path", ["peer", "staged"])
@pytest.mark.parametrize("mode, detail", [
    ("shape", r"ranks disagree"),
    ("order", r"ranks disagree"),
])
def test_ranks_that_disagree_fail_on_the_gpu(path, mode, detail):
    job = run_job("faults.py", 2, args=[mode], env=fault_env(path), timeout=300)
    for rank in (0, 1):
        assert job.values(rank, "RAISED") or "FINISHED" not in job.lines(rank), clean(job.output)[-4000:]
    assert re.search(detail, job.output), clean(job.output)[-4000:]
    assert job.returncode != 0
    assert job.leftovers() == []


@pytest.mark.parametrize("path", ["peer", "staged"])
def test_killed_peer_fails_every_survivor(path):
    job = run_job("faults.py", 3, args=["kill"], env=fault_env(path), timeout=300,
                  grace=FAULT_TIMEOUT + 20)
    for rank in (0, 1):
        assert "FINISHED" not in job.lines(rank), ended(job, rank)
        raised = job.values(rank, "RAISED")
        if raised:
            assert float(raised[0].split()[0]) < FAULT_TIMEOUT + 5, raised[0]
    assert re.search(r"died|closed by process 2|reset by process 2", job.output), clean(job.output)[-4000:]
    assert job.returncode != 0
    assert job.leftovers() == []


def test_stalled_peer_times_out_on_the_gpu():
    job = run_job("faults.py", 2, args=["stall"], env=fault_env("peer"), timeout=300, grace=5)
    assert "FINISHED" not in job.lines(0), ended(job, 0)
    assert re.search(r"timed out after", job.output), clean(job.output)[-4000:]
    assert job.returncode != 0
    assert job.leftovers() == []
