"""Failures in one rank: an assertion, a killed rank, a hang (timeout 8 s), a skip in every rank."""

import os
import signal
import time

import pytest


@pytest.mark.jax_processes(2, timeout=60)
def test_assertion_in_one_rank(jax_job):
    print("hello from rank", jax_job.process_index)
    assert jax_job.process_index == 0, "rank 1 disagrees"


@pytest.mark.jax_processes(2, timeout=60)
def test_killed_rank(jax_job):
    if jax_job.process_index == 1:
        os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.jax_processes(2, timeout=8)
def test_hang(jax_job):
    if jax_job.process_index == 1:
        time.sleep(600)


@pytest.mark.jax_processes(2, timeout=60)
def test_skipped_in_every_rank(jax_job):
    pytest.skip("nothing to check on this machine")
