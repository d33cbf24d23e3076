"""Several calls of one device in flight: collectives of different chains (lanes,
xla_ffi/comm/lanes.h) that ranks take in opposite orders both complete with numpy's results,
on one host, between emulated hosts over TCP and with two devices per process; with one lane
(JACCL_LANES=1, one call of a device at a time) the same program stops at once with "ranks
disagree" naming both calls, which shows the orders really were opposite."""

from __future__ import annotations

import re

import pytest

from harness import clean, job_env, run_job
from transports import TCP

TIMEOUT = 20  # JACCL_TIMEOUT: a lost wake-up or a lane that waits on another fails well inside

LAYOUTS = pytest.mark.parametrize("nprocs, devices, hosts, elements", [
    pytest.param(2, 1, None, 262144, id="2x1"),
    # calls below JACCL_ASYNC_MIN_KB: lane 0's run on XLA's thread, lane 1's never do
    pytest.param(2, 1, None, 1024, id="2x1-4KiB"),
    pytest.param(2, 1, TCP, 262144, id="2x1-hosts-tcp"),
    pytest.param(2, 2, None, 262144, id="2x2"),
])


def raised_on_every_rank(job, nprocs=2):
    """Each rank's RAISED message, after checking that every rank raised and nothing is left."""
    messages = [job.raised(rank)[1] for rank in range(nprocs)]
    assert job.returncode != 0
    assert job.leftovers() == []
    return messages


def assert_all_ok(job, nprocs):
    for rank in range(nprocs):
        assert job.values(rank, "RESULT") == ["ok"], clean(job.output)[-4000:]
    assert job.returncode == 0
    assert job.leftovers() == []


@LAYOUTS
def test_collectives_that_ranks_take_in_opposite_orders_both_complete(nprocs, devices, hosts,
                                                                     elements):
    job = run_job("lanes.py", nprocs, devices, args=["opposite", "--elements", str(elements)],
                  env=job_env(TIMEOUT, hosts, nprocs), timeout=180)
    assert_all_ok(job, nprocs)


def test_with_one_lane_the_same_program_stops_with_ranks_disagree_naming_both():
    job = run_job("lanes.py", 2, args=["opposite", "--repeats", "1"],
                  env=job_env(TIMEOUT, JACCL_LANES="1"), timeout=180)
    for message in raised_on_every_rank(job):
        assert "ranks disagree" in message, message
        assert "lanes.py call A" in message and "lanes.py call B" in message, message


def test_with_blocking_calls_opposite_orders_never_hang_nor_go_wrong():
    """JACCL_ASYNC=0: each call holds the XLA thread it runs on. When XLA computes the other
    call's operand on that same thread, a rank in lane 1's call cannot reach lane 0's, which
    its peer waits in, and both fail within the timeout naming the call they were in; when XLA
    computes it on another of its threads, both calls complete (seen both ways here, by
    timing). Either way every rank ends alike, within the timeout, with numpy's results or
    that error."""
    job = run_job("lanes.py", 2, args=["opposite", "--repeats", "1"],
                  env=job_env(5, JACCL_ASYNC="0"), timeout=180)
    assert job.seconds < 5 + 60, job.seconds  # the timeout, plus start-up and compiling
    if all(job.values(rank, "RESULT") == ["ok"] for rank in (0, 1)):
        assert_all_ok(job, 2)
        return
    for message in raised_on_every_rank(job):
        assert re.search(r"timed out after 5 s .* at lanes\.py call [AB]", message), message


def test_a_program_of_two_chains_gets_two_lanes_and_numpy_results():
    job = run_job("lanes.py", 2, args=["chains"], env=job_env(TIMEOUT), timeout=180)
    for rank in (0, 1):
        assert job.values(rank, "LANES") == ["0 0 1 1"], clean(job.output)[-4000:]
    assert_all_ok(job, 2)
