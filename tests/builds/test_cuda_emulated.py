"""The CUDA code, run without a GPU: tests/builds/cuda_emulation compiles it for the host against a
stand-in CUDA runtime (each emulated GPU's stream a thread, each GPU thread a fiber, UBSan on).

- The standalone program checks the kernels and the peer-path schedules bit for bit against
  the CPU engine, failures included.
- The whole _jaccl_cuda module, built the same way, runs the GPU test batteries of tests/cuda
  through JAX: CPU devices play GPUs of one host (its handlers registered for the CPU
  platform), other CPU devices compute the jax.lax reference; in one process (4 GPUs) and in
  2 processes (workspaces shared through emulated CUDA IPC), on both paths, the MoE ops with
  their gradients, a bad expert id that must stop every device, the failures of tests/cuda
  (ranks that disagree, a killed peer, a stalled peer) and the multi-process layout battery
  through tests/workers, and jaccl-bench kernels' code path.

Everything here runs with JACCL_DEBUG=INFO, and the module is linked as the GPU machine links
(build.py's GPU_MACHINE_LINK): the lines and errors must come out whole.

This is the only execution the CUDA code gets on machines without a GPU; tests/cuda runs the
real thing where one is lent."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from jax_jaccl.testing import compile_cache

from gpu_faults import (DISAGREE, FAULT_TIMEOUT, NAMES_THE_DEAD, TIMED_OUT,  # noqa: E402
                        assert_every_rank_stopped)
from harness import clean, run_job  # noqa: E402
from module_symbols import exported  # noqa: E402
from util import load_cuda_emulation_build  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent / "cuda_emulation"


emulation = load_cuda_emulation_build()

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("emulated_gpus")
    JOB_ENV.update({"JAX_COMPILATION_CACHE_DIR": str(tmp_path_factory.mktemp("compile_cache")),
                    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"})
    return emulation.build(out)


def test_the_emulated_module_exports_its_init_function_alone(built):
    """As the real one does (tests/in_process/test_symbols.py): its handlers reach JAX through
    registrations(), not the dynamic symbol table."""
    assert exported(built[1]) == ["PyInit__jaccl_cuda"]


def test_kernels_and_peer_schedules_on_emulated_gpus(built):
    program, _ = built
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=300)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    for group in ("kernels", "collectives", "moe", "failures"):
        assert re.search(rf"^{group} +ok ", report, re.M), report
    assert "PASSED: 0 failures" in report


# Every job here: JACCL_DEBUG=INFO, and (once `built` ran) one JAX compilation cache, so the
# peer and the staged runs of a battery compile its programs once (the path is chosen at run
# time, the programs are the same).
JOB_ENV = {"JACCL_DEBUG": "INFO"}


def gloo_job_env() -> dict:
    """JOB_ENV for a job whose jax.lax runs on gloo: without the cache on a jax whose gloo hangs
    on cached programs (jax_jaccl/testing/compile_cache.py)."""
    if not compile_cache.gloo_hangs_on_cached_programs():
        return dict(JOB_ENV)
    return {k: v for k, v in JOB_ENV.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))}
# A GPU handler's INFO line (xla_ffi/handlers/cuda/collectives.cc's log_path), numbers and all.
GPU_INFO_LINE = re.compile(r"INFO [a-z_]+ \d+ B \(<= 2\^\d+\) on GPU device \d+, group of \d+: \w")


def assert_info_whole(output):
    assert GPU_INFO_LINE.search(output), clean(output)[-3000:]


def run_jax(module, *args, timeout=600):
    result = subprocess.run([sys.executable, str(HERE / "jax_on_emulated_gpus.py"), str(module), *args],
                            capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **JOB_ENV))
    return result.returncode, result.stdout + result.stderr


def assert_path(report, path, processes):
    """Every process took only the expected path (the emulated module's counts)."""
    counts = [tuple(map(int, m)) for m in re.findall(r"PATHS peer=(\d+) staged=(\d+)", report)]
    assert len(counts) == processes, report[-3000:]
    for peer, staged in counts:
        assert (peer > 0 and staged == 0) if path == "peer" else (staged > 0 and peer == 0), counts


# One process runs the peer path (its kernels and schedules between devices that read each
# other); the staged path runs in two processes below, where it carries the same battery.
@pytest.mark.parametrize("path", ["peer"])
@pytest.mark.parametrize("suite", ["collectives", "moe"])
def test_gpu_batteries_through_the_cuda_handlers(built, suite, path):
    rc, report = run_jax(built[1], suite, "--path", path)
    assert rc == 0, report
    assert re.search(r"^OK \d+ (MoE )?checks on 4 cpu device", report, re.M), report
    assert_path(report, path, processes=1)
    assert_info_whole(report)


@pytest.mark.parametrize("path", ["peer", "staged"])
def test_bad_expert_id_stops_every_device(built, path):
    rc, report = run_jax(built[1], "bad-expert", "--path", path, timeout=120)
    assert rc == 0, report
    assert "NO ERROR" not in report, report
    assert re.search(r"RAISED .*launch failure", report), report
    assert "expert id 99 at flat index 7 of topk_idx is out of range [-1, 16)" in report, report
    if path == "peer":  # the other devices stop too, told by the abort words
        assert len(re.findall(r"GPU collective on device [123] failed", report)) == 3, report


@pytest.mark.parametrize("path", ["peer", "staged"])
@pytest.mark.parametrize("suite", ["collectives", "moe"])
def test_gpu_batteries_in_two_processes(built, suite, path):
    """The peer path across processes: each maps the other's workspace by its IPC handle."""
    done = subprocess.run([sys.executable, "-m", "jax_jaccl.launch", "-n", "2", "--", sys.executable,
                           str(HERE / "jax_on_emulated_gpus.py"), str(built[1]), suite, "--job",
                           "--path", path], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, **JOB_ENV))
    output = done.stdout + done.stderr
    assert done.returncode == 0, clean(output)[-6000:]
    assert len(re.findall(r"OK \d+ (MoE )?checks on 2 cpu device\(s\), process [01] of 2", output)) == 2, \
        clean(output)[-3000:]
    assert_path(output, path, processes=2)
    assert_info_whole(output)


@pytest.mark.parametrize("nprocs, devices, hosts", [(2, 2, 0), (4, 1, 2)], ids=["2x2", "4x1-2hosts"])
def test_layouts_choose_each_group_its_path(built, nprocs, devices, hosts):
    """tests/workers' layout battery on emulated GPUs with JACCL_CUDA_PATH=auto: groups
    whose members all read each other take the peer path, the others (across hosts, or a
    process's second GPU with another process's) are staged; all against jax.lax. The battery's
    transport types: every dtype already ran both paths in the batteries above."""
    env = {"JACCL_TEST_EMULATED_CUDA": str(built[1]), "JACCL_CUDA_PATH": "auto",
           "JACCL_TEST_BATTERY_DTYPES": "transport", **gloo_job_env()}
    if hosts:
        env["JACCL_TEST_FAKE_HOSTS"] = str(hosts)
    job = run_job("collectives.py", nprocs, devices, env=env, timeout=600)
    assert job.returncode == 0, clean(job.output)[-6000:]
    for rank in range(nprocs):
        assert "DONE" in job.lines(rank) and len(job.values(rank, "OK")) > 100, clean(job.output)[-3000:]
    assert "peer path" in job.output and "staged through host memory" in job.output
    assert job.leftovers() == []


def fault_job(built, mode, nprocs, path, grace=None):
    env = {"JACCL_TEST_EMULATED_CUDA": str(built[1]), "JACCL_CUDA_PATH": path,
           "JACCL_TIMEOUT": str(FAULT_TIMEOUT), **gloo_job_env()}
    return run_job("faults.py", nprocs, args=[mode], env=env, timeout=300, grace=grace)


@pytest.mark.parametrize("mode, path", [("shape", "peer"), ("order", "staged"), ("sites", "peer"),
                                        ("sites", "staged")])
def test_ranks_that_disagree_fail_on_emulated_gpus(built, mode, path):
    """A shape on the peer path (the start barrier's descriptor), an order on the staged one (the
    engine's check), and alike all_reduces written on two lines, dispatched in opposite orders,
    on both: both lines named."""
    job = fault_job(built, mode, 2, path)
    assert_every_rank_stopped(job, (0, 1), DISAGREE)
    if mode == "sites":
        assert re.search(r"at faults\.py:\d+ in <lambda>.* at faults\.py:\d+ in <lambda>",
                         job.output), job.output[-3000:]


@pytest.mark.parametrize("path", ["peer", "staged"])
def test_killed_peer_stops_every_emulated_gpu(built, path):
    job = fault_job(built, "kill", 3, path, grace=FAULT_TIMEOUT + 20)
    assert_every_rank_stopped(job, (0, 1), r"died", each=NAMES_THE_DEAD)


def test_stalled_peer_times_out_on_emulated_gpus(built):
    job = fault_job(built, "stall", 2, "peer", grace=5)
    assert_every_rank_stopped(job, (0,), TIMED_OUT)


def test_kernel_benchmark_runs_on_emulated_gpus(built):
    """jaccl-bench kernels' code path (the first thing run_on_gpu.sh runs); the emulated
    numbers mean nothing."""
    rc, report = run_jax(built[1], "bench", timeout=300)
    assert rc == 0, report
    rows = [l for l in report.splitlines() if l.startswith("| ") and not l.startswith("| kernel")]
    kernels = [r.split(" | ")[0][2:] for r in rows]
    assert kernels == ["device copy", "reduce 2x float32 (sum)", "reduce 4x float32 (sum)",
                       "reduce 9x float32 (sum)", "reduce 2x bfloat16 (sum)", "reduce 4x bfloat16 (sum)",
                       "reduce 9x bfloat16 (sum)", "MoE combine bf16 T=64 K=3 H=136",
                       "gather rows bf16 192 rows H=136", "dispatch pack bf16 192 rows H=136"], report
    # Every kernel's result was checked against XLA's (here XLA on the CPU) before timing.
    assert all(r.endswith("| ok |") for r in rows[1:]), report
    assert "copies on every trip" not in report  # XLA's loops time its math alone


def test_rewrite_refuses_what_it_does_not_know():
    # A launch the rewrite cannot parse, or device assembly it has no host stand-in for, must
    # fail the build rather than leave a kernel unexercised.
    with pytest.raises(RuntimeError, match="inline assembly"):
        emulation.rewrite('asm volatile("mov.u32 %0, %%laneid;" : "=r"(x));', "probe.cu")
    with pytest.raises(RuntimeError, match="kernel launches"):
        emulation.rewrite("k<<<1, 2, 0, s>>> (a); f(<<<);", "probe.cu")
    rewritten = emulation.rewrite("kernel<float, 4><<<blocks, 128, 0, stream>>>(a, b);", "probe.cu")
    assert rewritten == "emulate_launch(blocks, 128, 0, stream, kernel<float, 4>, a, b);"
