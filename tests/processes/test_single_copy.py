"""Streams read in place (xla_ffi/collectives/engine.h, "Single copy"): between processes of one
host a receiver copies an all_gather's or all_to_all's block straight out of the sender's
memory, and between devices of one process an all_reduce's or reduce_scatter's fold reads a
peer's block where it lies; every result stays bitwise numpy's model of jax.lax's
(tests/workers/single_copy.py), and each rank counts the streams it read so (the engine's
`streams_read_in_place()`): some where the path is open, none with JACCL_SINGLE_COPY_MIN_KB=0,
between hosts, or where the processes cannot read each other (each in a pid namespace of its
own)."""

from __future__ import annotations

import os
import shutil

import pytest

from harness import clean, job_env, run_job
from transports import TCP


ALL_REDUCES, REDUCE_SCATTERS = 20, 8  # the worker's reductions (with several devices a process)


def in_place_counts(job, nprocs, devices=1):
    reductions = f"{ALL_REDUCES} {REDUCE_SCATTERS}" if devices > 1 else "0 0"
    for rank in range(nprocs):
        assert job.values(rank, "RESULT") == ["ok"], clean(job.output)[-4000:]
        assert job.values(rank, "REDUCTIONS") == [reductions]
    assert job.returncode == 0
    assert job.leftovers() == []
    return [int(job.values(rank, "IN_PLACE")[0]) for rank in range(nprocs)]


def devices_reading_everything(nprocs, devices):
    """The streams the fixed calls read in place: each device reads every other's block of 4
    all_gathers and 2 all_to_alls of each of 4 types; and a fold reads each block of a device
    of its own process, whose devices copy each other's reduced blocks too (all_reduce: 2 a
    peer, reduce_scatter: 1)."""
    return (devices * (nprocs * devices - 1) * 4 * 6
            + devices * (devices - 1) * (ALL_REDUCES * 2 + REDUCE_SCATTERS))


@pytest.mark.parametrize("nprocs, devices", [(2, 1), (3, 1), (2, 2)], ids=["2x1", "3x1", "2x2"])
def test_blocks_read_in_place_between_processes_of_a_host_are_bitwise_lax(nprocs, devices):
    job = run_job("single_copy.py", nprocs, devices, env=job_env(60), timeout=240)
    # each device reads every other device's block in place (a device of its own process's
    # with memcpy) in 4 all_gathers and 2 all_to_alls (split on the leading axis: contiguous
    # blocks; the other splits' strided blocks go through frames) of each of the 4 types, and
    # the blocks of its own process's devices in the reductions
    assert in_place_counts(job, nprocs, devices) == \
        [devices_reading_everything(nprocs, devices)] * nprocs


def test_with_single_copy_off_every_block_goes_through_frames_alike():
    job = run_job("single_copy.py", 2, env=job_env(60, JACCL_SINGLE_COPY_MIN_KB="0"),
                  timeout=240)
    assert in_place_counts(job, 2) == [0, 0]


def test_only_processes_of_one_host_read_each_other_in_place():
    """4 processes on 2 emulated hosts (TCP between them): each reads its host peer's blocks
    in place and gets the other host's through frames."""
    env = {**job_env(60), "JACCL_TEST_FAKE_HOSTS": "2", **TCP}
    job = run_job("single_copy.py", 4, env=env, timeout=240)
    assert in_place_counts(job, 4) == [devices_reading_everything(2, 1)] * 4  # one host peer


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and util-linux's unshare (a pid namespace per process)")
def test_processes_that_cannot_read_each_other_go_through_frames(monkeypatch):
    """Each process in a pid namespace of its own, where each is pid 1: a peer's pid names this
    very process, so none reads another in place and every block goes through frames, with the
    same results. (Processes of one host in different pid namespaces are otherwise not
    supported: a peer's pid is taken for a dead process's.)"""
    monkeypatch.setenv("JACCL_TEST_WORKER_PREFIX", "unshare --pid --fork --mount-proc")
    job = run_job("single_copy.py", 2, env=job_env(60), timeout=240)
    assert in_place_counts(job, 2) == [0, 0]


def test_drawn_calls_with_most_blocks_read_in_place_are_bitwise_numpy():
    """JACCL_SINGLE_COPY_MIN_KB=1: 30 drawn all_gathers and all_to_alls (8 dtypes, ranks 1-3,
    sizes from a few bytes to 2 MiB per device, every axis) at 2 x 2, most of whose blocks of a
    KiB or more go in place, in one chunk or several."""
    job = run_job("single_copy.py", 2, 2, args=["--random", "30"],
                  env=job_env(60, JACCL_SINGLE_COPY_MIN_KB="1"), timeout=240)
    counts = in_place_counts(job, 2, 2)
    assert counts[0] == counts[1] > devices_reading_everything(2, 2)
