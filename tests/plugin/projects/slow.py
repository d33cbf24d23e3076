"""A job that outlives pytest-timeout's ini limit (2 s) within its own timeout (60 s)."""

import time

import pytest


@pytest.mark.jax_processes(2, timeout=60)
def test_slow(jax_job):
    time.sleep(4)
