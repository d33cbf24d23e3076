"""examples/elastic_data_parallel.py (or, with `--example elastic_moe_serving.py`, that one) as
a test job's worker: the harness's `--marker M` (how it finds what a job left running) and
`--example` are taken off, the rest are the example's own arguments. With
JACCL_TEST_FAKE_HOSTS=N its processes sit on N emulated hosts; with JACCL_TEST_RESTART_DELAY_S
a process jaccl-run started again waits that long before it starts."""

from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path

from common import place_on_emulated_host  # imports jax; jax.distributed starts in the example

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

place_on_emulated_host()
delay = float(os.environ.get("JACCL_TEST_RESTART_DELAY_S", "0"))
if delay and int(os.environ.get("JACCL_RESTART", "0")):  # the others go on without it a while
    time.sleep(delay)
at = sys.argv.index("--marker")
del sys.argv[at:at + 2]
example = EXAMPLES / "elastic_data_parallel.py"
if "--example" in sys.argv:
    at = sys.argv.index("--example")
    example = EXAMPLES / sys.argv[at + 1]
    del sys.argv[at:at + 2]
sys.argv[0] = str(example)
runpy.run_path(str(example), run_name="__main__")
