"""common/half.h's float16 conversions, written without branches so that the reduction loops
vectorise, give on every input what the CPU's own conversion instructions (F16C) give, but for
the two ways jaccl defines differently: a NaN rounded to float16 is the quiet NaN of its sign
without payload, and a signalling float16 NaN widens to float exactly (the instruction quiets
it). tests/builds/native/half_checks.cc runs all 2^32 floats and 2^16 float16 values, built with
the optimisation the engine is built with, so the loop over to_f16 is vectorised as there."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")


def build_and_run(tmp_path, name, flags, args=()):
    program = tmp_path / name
    subprocess.run(["g++", "-std=c++17", "-ffp-contract=off", "-fno-trapping-math", *flags,
                    "-I", str(ROOT / "xla_ffi"), str(ROOT / "tests/builds/native/half_checks.cc"),
                    "-o", str(program)], check=True, timeout=120)
    done = subprocess.run([str(program), *args], capture_output=True, text=True, timeout=120)
    if done.returncode == 2:
        pytest.skip(f"this CPU cannot say: {done.stdout.strip()}")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_float16_conversions_match_the_cpu_on_every_input(tmp_path):
    build_and_run(tmp_path, "half_checks", ["-O3"])


def test_float16_conversions_have_no_undefined_behaviour(tmp_path):
    """Both results of every select are computed: the shifts stay in range for every input
    (UBSan, every 64th block of floats: all exponents)."""
    build_and_run(tmp_path, "half_checks_ubsan",
                  ["-O1", "-fsanitize=undefined", "-fno-sanitize-recover=all"], ["64"])
