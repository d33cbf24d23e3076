"""A crash stays a crash: a process that ran a jaccl op (so loaded the engine, libfabric and
its PSM providers, whose signal handlers would print a backtrace, write a *.btr file and exit
with status 1) and then aborts or reads address 0 dies by SIGABRT or SIGSEGV, alone and under
jaccl-run, which names the signal; no *.btr file is left in the working folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from jax_jaccl._ext import CRASH_HANDLER_SWITCHES

WORKER = Path(__file__).parents[1] / "workers" / "crash.py"
SIGNALS = {"abort": signal.SIGABRT, "segv": signal.SIGSEGV}


def without_switches() -> dict:
    return {k: v for k, v in os.environ.items() if k not in CRASH_HANDLER_SWITCHES}


def psm_was_loaded(output: str) -> None:
    """The test means something only where the PSM libraries (and their handlers) were there."""
    if "PSM loaded" not in output:
        if os.environ.get("JACCL_REQUIRE_OFI"):
            pytest.fail("libfabric's PSM libraries were not loaded, though JACCL_REQUIRE_OFI is set")
        pytest.skip("libfabric's PSM libraries are not installed: no crash handlers to keep out")


def no_backtrace_files(folder: Path) -> None:
    left = [p.name for p in folder.iterdir() if p.name.endswith(".btr")]
    assert not left, f"a crash handler wrote {left}"


@pytest.mark.parametrize("how", SIGNALS)
def test_a_crash_after_a_jaccl_op_dies_by_its_signal(tmp_path, how):
    done = subprocess.run([sys.executable, str(WORKER), how], cwd=tmp_path, env=without_switches(),
                          capture_output=True, text=True, timeout=120)
    assert "SUM 1.0 processes 1" in done.stdout, done.stdout + done.stderr[-3000:]
    psm_was_loaded(done.stdout)
    assert done.returncode == -SIGNALS[how], (done.returncode, done.stderr[-3000:])
    no_backtrace_files(tmp_path)


@pytest.mark.parametrize("how", SIGNALS)
def test_jaccl_run_names_the_signal_a_process_died_by(tmp_path, how):
    done = subprocess.run([sys.executable, "-m", "jax_jaccl.launch", "-n", "2", "--", sys.executable,
                           str(WORKER), how], cwd=tmp_path, env=without_switches(),
                          capture_output=True, text=True, timeout=180)
    output = done.stdout + done.stderr
    assert output.count("SUM 1.0 processes 2") == 2, harness.clean(output)[-3000:]
    psm_was_loaded(output)
    name = SIGNALS[how].name
    assert f"was killed by {name}" in output, harness.clean(output)[-3000:]
    assert done.returncode == 128 + SIGNALS[how], (done.returncode, harness.clean(output)[-3000:])
    no_backtrace_files(tmp_path)
