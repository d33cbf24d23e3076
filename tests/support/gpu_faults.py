"""What a failing GPU job must show, shared by tests/cuda (a real GPU) and
tests/builds/test_cuda_emulated.py (emulated GPUs): the fault workers (tests/workers/
faults.py) run with JACCL_TIMEOUT=FAULT_TIMEOUT, and every surviving rank must raise within
DEADLINE (or end, ENDED, when XLA never returns the error to a process waiting on its GPU:
xla_ffi/cuda/stopped_context.h) and print a whole failure line (the reason, numbers and
all)."""

from __future__ import annotations

import re

from harness import Job, clean

FAULT_TIMEOUT = 10
DEADLINE = FAULT_TIMEOUT + 5

# The line a process prints when one of its GPU collectives failed.
GPU_FAILURE = r"jaccl: (?:GPU|staged) collective on (?:GPU )?device \d+ failed: \S"
# The mismatch in full: the peer path's call descriptors (with the line that wrote each call)
# or the CPU engine's frame headers.
DISAGREE = (r"ranks disagree: device \d+ runs all_(reduce|gather) of float32\[[12]000\] -> \[\d+\] "
            r"\((sum, )?.*\)( at \S+:\d+ in \S+)? but device \d+ \(group rank [01]\) runs all_(reduce|gather) of float32|"
            r"ranks disagree: rank \d \(device \d+, process \d, pid \d+\) is in all_(reduce|gather) #0 "
            r"of float32\[\d+\]")
# A survivor of a killed process 2 names it, also one that another survivor told to stop.
NAMES_THE_DEAD = r"collective on (?:GPU )?device \d+ failed: .*process 2 \(pid \d+\).* died"
# A process that was waiting on its GPU when the failure came: jaccl ends it.
ENDED = r"jaccl: the CUDA context of GPU device \d+ stopped on the failure above .*: this process ends"
TIMED_OUT = rf"timed out after {FAULT_TIMEOUT} s waiting for device \d+ \(group rank 1\)"


def assert_every_rank_stopped(job: Job, ranks, detail: str, each: str = GPU_FAILURE):
    """Each of `ranks` raised within DEADLINE (or was ended by jaccl: ENDED) instead of finishing
    and printed a failure line matching `each`; the job's output matches `detail`; the job
    failed and left nothing behind."""
    for rank in ranks:
        assert "FINISHED" not in job.lines(rank), clean(job.output)[-4000:]
        raised = job.values(rank, "RAISED")
        ended = re.search(ENDED, "\n".join(job.lines(rank)))
        assert (raised and float(raised[0].split()[0]) < DEADLINE) or (not raised and ended), \
            clean(job.output)[-4000:]
        assert re.search(each, "\n".join(job.lines(rank))), clean(job.output)[-4000:]
    assert re.search(detail, job.output), clean(job.output)[-4000:]
    assert job.returncode != 0
    assert job.leftovers() == []
