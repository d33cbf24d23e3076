"""examples/elastic_data_parallel.py as a test job's worker: the harness's `--marker M` (how it
finds what a job left running) is taken off, the rest are the example's own arguments. With
JACCL_TEST_FAKE_HOSTS=N its processes sit on N emulated hosts; with JACCL_TEST_RESTART_DELAY_S
a process jaccl-run started again waits that long before it starts."""

from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path

from common import place_on_emulated_host  # imports jax; jax.distributed starts in the example

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "elastic_data_parallel.py"

place_on_emulated_host()
delay = float(os.environ.get("JACCL_TEST_RESTART_DELAY_S", "0"))
if delay and int(os.environ.get("JACCL_RESTART", "0")):  # the others go on without it a while
    time.sleep(delay)
at = sys.argv.index("--marker")
del sys.argv[at:at + 2]
sys.argv[0] = str(EXAMPLE)
runpy.run_path(str(EXAMPLE), run_name="__main__")
