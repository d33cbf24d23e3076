"""Failures end in a clear error on every surviving rank within JACCL_TIMEOUT, never a hang
or a wrong answer, and leave no process or shared-memory segment behind: on one host, and
on emulated hosts over jaccl's TCP and over the OFI transport (libfabric's tcp provider)."""

from __future__ import annotations

import re

import pytest

from harness import clean, job_env, run_job
from transports import OFI, OFI_MESSAGES, TCP, needs_ofi

TIMEOUT = 6  # JACCL_TIMEOUT for these jobs


def env(hosts, nprocs=2):
    """The job's settings for `hosts`: None, one host; "async", one host with every call on the
    devices' own threads (handlers/cpu/async_call.h); else a transport between emulated hosts,
    one per process."""
    if hosts == "async":
        return job_env(TIMEOUT, None, nprocs, JACCL_ASYNC_MIN_KB="0")
    return job_env(TIMEOUT, hosts, nprocs)


HOSTS = pytest.mark.parametrize("hosts", [
    pytest.param(None, id="1host"), pytest.param("async", id="1host-every-call-async"),
    pytest.param(TCP, id="hosts-tcp"),
    pytest.param(OFI, id="hosts-ofi", marks=needs_ofi),
    pytest.param(OFI_MESSAGES, id="hosts-ofi-messages", marks=needs_ofi)])


DISAGREEMENTS = {
    "shape": r"float32\[1000\].*float32\[2000\]|float32\[2000\].*float32\[1000\]",
    "dtype": r"int32.*float32|float32.*int32",
    "op": r"\(sum,.*\(max,|\(max,.*\(sum,",
    "order": r"all_reduce #0.*all_gather #0|all_gather #0.*all_reduce #0",
    # Alike in all but the line that wrote them: both lines named, and how such calls meet.
    "sites": r"at faults\.py:(\d+) in <lambda>.* at faults\.py:(?!\1)\d+ in <lambda>.*"
             r"written in different places",
}


# Every disagreement on one host; between hosts, over each transport, the two whose frames
# differ on the wire (a size the receiver does not expect; another call's frames).
@pytest.mark.parametrize("mode, hosts", [
    *[pytest.param(mode, None, id=f"{mode}-1host") for mode in DISAGREEMENTS],
    # Both programs' calls queued on the device threads at once (in flight together).
    pytest.param("sites", "async", id="sites-1host-every-call-async"),
    pytest.param("sites", TCP, id="sites-hosts-tcp"),  # the site crosses the wire in the header
    *[pytest.param(mode, transport, id=f"{mode}-{name}", marks=marks)
      for mode in ("shape", "order")
      for transport, name, marks in ((TCP, "hosts-tcp", ()), (OFI, "hosts-ofi", needs_ofi),
                                     (OFI_MESSAGES, "hosts-ofi-messages", needs_ofi))],
])
def test_ranks_that_disagree_all_get_an_error_naming_both(mode, hosts):
    detail = DISAGREEMENTS[mode]
    job = run_job("faults.py", 2, args=[mode], env=env(hosts), timeout=120)
    for rank in (0, 1):
        seconds, message = job.raised(rank)
        assert seconds < TIMEOUT + 2, message
        assert "rank 0" in message and "rank 1" in message, message
        assert re.search(r"ranks disagree|failed: .*ranks disagree", message), message
    messages = " ".join(job.raised(r)[1] for r in (0, 1))
    assert re.search(detail, messages), messages
    assert job.returncode != 0
    assert job.leftovers() == []


@pytest.mark.parametrize("mode, reason", [
    ("ragged-bounds", r"input_offsets\[0\] = \d+ with send_sizes\[0\] = 1 reads past the "
                      r"operand's \d+ rows"),
    ("ragged-sizes", r"ranks disagree: .*expects recv_sizes\[0\] = 2 rows from .*which sends "
                     r"send_sizes\[\d+\] = 1"),
])
def test_bad_ragged_arguments_are_an_error_on_every_rank(mode, reason):
    """One process's ragged_all_to_all arguments are wrong: it names the entry, and every
    other rank raises within the deadline, saying which process failed and why."""
    job = run_job("faults.py", 2, args=[mode], env=env(None), timeout=120)
    for rank in (0, 1):
        seconds, message = job.raised(rank)
        assert seconds < TIMEOUT + 2, message
        assert re.search(reason, message), message
    assert "failed: " in job.raised(0)[1]  # rank 0 learns it from the process that failed
    assert job.returncode != 0
    assert job.leftovers() == []


@HOSTS
def test_killed_peer_every_survivor_raises_naming_it(hosts):
    job = run_job("faults.py", 3, args=["kill"], env=env(hosts, 3), timeout=120,
                  grace=TIMEOUT + 10)
    for rank in (0, 1):
        seconds, message = job.raised(rank)
        assert seconds < 1.5 + TIMEOUT, message
        # A failed libfabric operation may be seen before the control link's close.
        assert re.search(r"process 2 \(pid \d+\) died|(closed|reset) by process 2 \(it exited|"
                         r"between device \d+ and device \d+ of process 2 failed", message), message
        assert "rank 2" in message or "process 2" in message, message
    assert job.lines(2)[-1].startswith("STARTED") or "RAISED" not in " ".join(job.lines(2))
    assert job.returncode != 0
    assert job.leftovers() == []


def test_killed_process_at_2x2_its_peers_raise_naming_it_though_they_lend_each_other_blocks():
    """2 processes x 2 devices, the last process SIGKILLed during 16 MiB all_reduces: the two
    devices of the survivor lend each other their blocks in place (engine.h, "Single copy"),
    and the one whose call fails first waits for the other's reads of its buffers before XLA
    may free them; the survivor raises naming the dead process, and nothing crashes."""
    job = run_job("faults.py", 2, 2, args=["kill"], env=env(None), timeout=120,
                  grace=TIMEOUT + 10)
    assert "LOOPING" in job.lines(0)  # the all_reduces ran before the kill
    seconds, message = job.raised(0)
    assert seconds < 1.5 + TIMEOUT, message
    assert re.search(r"process 1 \(pid \d+\) died", message), message
    assert job.returncode != 0
    assert job.leftovers() == []


NEVER_REACHED = (r"rank {} \(device \d+, process \d+, pid \d+\) never reached this call "
                 r"\(it entered none")


@HOSTS
def test_stalled_peer_times_out_naming_it(hosts):
    job = run_job("faults.py", 2, args=["stall"], env=env(hosts), timeout=120, grace=2)
    seconds, message = job.raised(0)
    assert TIMEOUT - 0.5 < seconds < TIMEOUT + 3, message
    assert "timed out after 6 s" in message and "waiting for rank 1" in message, message
    # On one host the survivor reads the stalled process's call board; across hosts it cannot.
    assert bool(re.search(NEVER_REACHED.format(1), message)) == (hosts in (None, "async")), message
    assert "evicted" not in message, message  # only with JACCL_EVICT_STALLED (--keep-going)
    assert job.returncode != 0
    assert job.leftovers() == []


def test_a_stalled_process_behind_a_full_ring_is_still_asked_to_leave():
    """Between emulated hosts over TCP with JACCL_EVICT_STALLED, process 1 stalls before a
    128 MiB all_reduce whose frames from process 0 fill its receiving ring and its sockets: at
    process 0's deadline the request to leave goes on the link's control socket, which nothing
    queues behind, and process 1 kills itself at once (it used to stay until jaccl-run's grace
    ran out: the request waited behind the frames it never read)."""
    job = run_job("faults.py", 2, args=["stall-big"], timeout=120, grace=60,
                  env={**env(TCP), "JACCL_EVICT_STALLED": "1"})
    seconds, message = job.raised(0)
    assert TIMEOUT - 0.5 < seconds < TIMEOUT + 3, message
    assert "process 1 (on another host) asked to leave if it never reached this call" in message
    out = clean(job.output)
    assert re.search(r"\[1\] jaccl \d+ WARN evicted: process 0 timed out in call #\d+ waiting "
                     r"for device \d+, process 1, .*which never reached it", out), out[-3000:]
    assert re.search(r"process 1 was killed by SIGKILL at [\d.]+ s", out), out[-3000:]
    assert job.seconds < 40, out[-3000:]  # well inside the grace: it did not wait for jaccl-run
    assert job.leftovers() == []


def test_every_survivor_names_the_stalled_rank_not_the_one_it_waits_for():
    """A one-way ring of 3 with rank 2 stalled: rank 0 waits for rank 2, but rank 1 waits for
    rank 0 (which must forward rank 2's block first). Both name rank 2 as the one that never
    reached the call, and neither says so of a rank that did."""
    job = run_job("faults.py", 3, args=["stall"], timeout=120, grace=2,
                  env={**env(None, 3), "JACCL_ALGO": "all_reduce=ring_oneway"})
    for rank in (0, 1):
        seconds, message = job.raised(rank)
        assert seconds < TIMEOUT + 3, message
        assert "ring_oneway" in message and re.search(NEVER_REACHED.format(2), message), message
        assert not re.search(r"rank [01] \([^)]*\) never reached", message), message
    assert job.returncode != 0
    assert job.leftovers() == []


@pytest.mark.parametrize("mode", ["raises", "raises-early"])
def test_an_uncaught_exception_ends_the_job_at_once_naming_it(mode):
    """Process 1 raises a RuntimeError it does not catch (with jaccl running there, or before
    it started jaccl while process 0 starts it): process 0 raises within seconds, not at
    JACCL_TIMEOUT, naming process 1, its error and its line; process 1's own error is the last
    thing it prints (no shutdown barrier, no abort stack after it); jaccl-run names it."""
    job = run_job("faults.py", 2, args=[mode], env={"JACCL_TIMEOUT": "60"}, timeout=120, grace=60)
    out = clean(job.output)
    assert job.returncode != 0 and job.seconds < 40, out[-3000:]
    cause = "it raised RuntimeError: the last process found bad data (faults.py, line "
    if mode == "raises":
        seconds, message = job.raised(0)
        assert seconds < 5 and "process 1 (pid " in message and cause in message, message
    else:  # process 0 was starting jaccl (compiling its programs): the start-up fails
        assert any(f"process 1 failed before jaccl started there: {cause}" in line
                   for line in job.lines(0)), out[-3000:]
    # Its stdout and stderr reach jaccl-run through two pipes, so what it printed before the
    # raise (STARTED, TRANSPORT: stdout) may come after the traceback (stderr); nothing else may.
    said = [l for l in job.lines(1) if not l.startswith(("STARTED ", "TRANSPORT "))]
    assert said[-1] == "RuntimeError: the last process found bad data", out[-3000:]
    assert "jaccl-run: process 1 exited with 1 (RuntimeError: the last process found bad data)" \
        in job.output, out[-3000:]
    assert job.leftovers() == []


@pytest.mark.parametrize("mode", ["normal", "exception"])
def test_nothing_left_behind_after_exit(mode):
    job = run_job("faults.py", 2, args=[mode], timeout=120)
    for rank in (0, 1):
        assert "FINISHED" in job.lines(rank), clean(job.output)[-3000:]
    assert (job.returncode == 0) == (mode == "normal"), clean(job.output)[-3000:]
    assert job.leftovers() == []


def test_strangers_are_rejected_and_the_job_goes_on():
    job = run_job("faults.py", 2, args=["stranger"], env=env(TCP), timeout=120)
    out = clean(job.output)
    assert job.returncode == 0, out[-3000:]
    for rank in (0, 1):
        assert "FINISHED" in job.lines(rank), out[-3000:]
    assert job.values(0, "STRANGER")[0].startswith("0 stranger answered: b''"), out[-3000:]
    rejected = [l for l in job.lines(1) if "tcp: rejected connection from" in l]
    assert any("not a jaccl handshake" in l for l in rejected), out[-3000:]
    assert any("wrong job secret" in l for l in rejected), out[-3000:]
