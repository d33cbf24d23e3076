"""The CUDA kernels and peer-path schedules, run without a GPU: tests/cuda_emulation compiles
them for the host (each emulated GPU a thread, each GPU thread a fiber, UBSan on) and checks
them bit for bit against the CPU engine, failures included. This is the only execution the CUDA
code gets on machines without a GPU; tests/cuda runs the real thing where one is lent."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "cuda_emulation"))
import build as emulation  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return emulation.build(tmp_path_factory.mktemp("emulated_gpus"))


def test_kernels_and_peer_schedules_on_emulated_gpus(program):
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=300)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    for group in ("kernels", "collectives", "moe", "failures"):
        assert re.search(rf"^{group} +ok ", report, re.M), report
    assert "PASSED: 0 failures" in report


def test_rewrite_refuses_what_it_does_not_know():
    # A launch the rewrite cannot parse, or device assembly it has no host stand-in for, must
    # fail the build rather than leave a kernel unexercised.
    with pytest.raises(RuntimeError, match="inline assembly"):
        emulation.rewrite('asm volatile("mov.u32 %0, %%laneid;" : "=r"(x));', "probe.cu")
    with pytest.raises(RuntimeError, match="kernel launches"):
        emulation.rewrite("k<<<1, 2, 0, s>>> (a); f(<<<);", "probe.cu")
    rewritten = emulation.rewrite("kernel<float, 4><<<blocks, 128, 0, stream>>>(a, b);", "probe.cu")
    assert rewritten == "emulate_launch(blocks, 128, 0, stream, kernel<float, 4>, a, b);"
