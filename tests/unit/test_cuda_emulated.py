"""The CUDA code, run without a GPU: tests/cuda_emulation compiles it for the host against a
stand-in CUDA runtime (each emulated GPU's stream a thread, each GPU thread a fiber, UBSan on).

- The standalone program checks the kernels and the peer-path schedules bit for bit against
  the CPU engine, failures included.
- The whole _jaccl_cuda module, built the same way, runs the GPU test batteries of tests/cuda
  through JAX: CPU devices 0-3 play four GPUs of one host (its handlers registered for the
  CPU platform), devices 4-7 compute the jax.lax reference; both paths, the MoE ops with
  their gradients, and a bad expert id that must stop every device.

This is the only execution the CUDA code gets on machines without a GPU; tests/cuda runs the
real thing where one is lent."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parents[1] / "cuda_emulation"
sys.path.insert(0, str(HERE))
import build as emulation  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("emulated_gpus")
    return emulation.build(out), emulation.build_module(out)


def test_kernels_and_peer_schedules_on_emulated_gpus(built):
    program, _ = built
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=300)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    for group in ("kernels", "collectives", "moe", "failures"):
        assert re.search(rf"^{group} +ok ", report, re.M), report
    assert "PASSED: 0 failures" in report


def run_jax(module, *args, timeout=600):
    result = subprocess.run([sys.executable, str(HERE / "jax_on_emulated_gpus.py"), str(module), *args],
                            capture_output=True, text=True, timeout=timeout)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("path", ["peer", "staged"])
@pytest.mark.parametrize("suite", ["collectives", "moe"])
def test_gpu_batteries_through_the_cuda_handlers(built, suite, path):
    rc, report = run_jax(built[1], suite, "--path", path)
    assert rc == 0, report
    assert re.search(r"^OK \d+ (MoE )?checks on 4 cpu device", report, re.M), report
    peer, staged = map(int, re.search(r"PATHS peer=(\d+) staged=(\d+)", report).groups())
    assert (peer > 0 and staged == 0) if path == "peer" else (staged > 0 and peer == 0), report


@pytest.mark.parametrize("path", ["peer", "staged"])
def test_bad_expert_id_stops_every_device(built, path):
    rc, report = run_jax(built[1], "bad-expert", "--path", path, timeout=120)
    assert rc == 0, report
    assert "NO ERROR" not in report, report
    assert re.search(r"RAISED .*launch failure", report), report
    assert "expert id 99 at flat index 7 of topk_idx is out of range [-1, 16)" in report, report
    if path == "peer":  # the other devices stop too, told by the abort words
        assert len(re.findall(r"GPU collective on device [123] failed", report)) == 3, report


def test_rewrite_refuses_what_it_does_not_know():
    # A launch the rewrite cannot parse, or device assembly it has no host stand-in for, must
    # fail the build rather than leave a kernel unexercised.
    with pytest.raises(RuntimeError, match="inline assembly"):
        emulation.rewrite('asm volatile("mov.u32 %0, %%laneid;" : "=r"(x));', "probe.cu")
    with pytest.raises(RuntimeError, match="kernel launches"):
        emulation.rewrite("k<<<1, 2, 0, s>>> (a); f(<<<);", "probe.cu")
    rewritten = emulation.rewrite("kernel<float, 4><<<blocks, 128, 0, stream>>>(a, b);", "probe.cu")
    assert rewritten == "emulate_launch(blocks, 128, 0, stream, kernel<float, 4>, a, b);"
