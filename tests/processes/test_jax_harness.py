"""jaccl under jax's own multi-process test harness (jax._src.test_multiprocess, which runs
jax's multiprocess tests): processes that call jax.distributed.initialize() themselves, launched
by that harness with site-packages on their PYTHONPATH (where an editable install's import hook
is never loaded), with jax_jaccl.lax's collectives in jax.lax's place
(tests/workers/jax_harness.py). 2 processes x 2 CPU devices."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

from harness import WORKERS

TESTS = 8  # the worker's test methods, parameters counted


def test_jaxs_multiprocess_harness_runs_with_jaccl_in_jax_laxs_place(tmp_path):
    env = dict(os.environ, TEST_UNDECLARED_OUTPUTS_DIR=str(tmp_path), JAX_NUM_CPU_DEVICES="2",
               JACCL_TIMEOUT="60")  # PYTHONPATH has tests/support (tests/conftest.py)
    proc = subprocess.Popen([sys.executable, str(WORKERS / "jax_harness.py"),
                             "--num_processes=2"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    try:
        summary, _ = proc.communicate(timeout=240)
    finally:  # the harness's processes share its process group: none outlives the test
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    logs = [(tmp_path / f"jax_{i}_stderr.log").read_text(errors="replace") for i in range(2)]
    assert proc.returncode == 0, summary[-6000:]
    for i, log in enumerate(logs):
        assert re.search(rf"Ran {TESTS} tests in [\d.]+s\n\nOK\n", log), f"process {i}:\n{log}"
        assert "SKIP" not in log, f"process {i}:\n{log}"
