"""Jobs that record when they ran, for the cap on processes across xdist workers."""

import os
import time
from pathlib import Path

import pytest


def record_interval(name, jax_job):
    start = time.time()
    time.sleep(2)
    out = Path(os.environ["PLUGIN_TEST_OUT"])
    (out / f"interval-{name}-{jax_job.process_index}").write_text(f"{start} {time.time()}")


@pytest.mark.parametrize("case", range(2))
@pytest.mark.jax_processes(2, timeout=120)
def test_pair(jax_job, case):
    record_interval(f"pair{case}", jax_job)


@pytest.mark.jax_processes(3, timeout=120)
def test_bigger_than_the_cap(jax_job):
    record_interval("big", jax_job)
