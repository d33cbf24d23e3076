"""Collectives across emulated hosts (network namespaces, veth links): where the bytes go, and
failures of hosts and links; over jaccl's TCP and over the OFI transport (libfabric's tcp
provider, bound to each host's address). The collective and MoE batteries across namespace
hosts run as pytest-plugin jobs (tests/plugin/test_*_as_jobs.py)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from jobs import run_on_hosts

sys.path.insert(0, str(Path(__file__).parents[1] / "multiprocess"))
from transports import BOTH  # noqa: E402

TIMEOUT = 8  # JACCL_TIMEOUT for the fault tests


def clean(output):
    return "\n".join(l for l in output.splitlines()
                     if not re.search(r"Gloo|^\[\d\] [IWE]\d{4}|^\[\d\] +@", l))


def tx_per_host(job, nhosts, per_host):
    return [int(job.values(h * per_host, "TX")[0]) for h in range(nhosts)]


def test_bytes_on_the_links_match_the_algorithm(make_hosts):
    """2 hosts x 2 processes, all_reduce of S bytes per rank: the hierarchical schedule sends
    S per host per call over the network (2(H-1)/H of the buffer, from L ranks that own S/L
    each), the flat mesh 2S; a collective inside each host sends nothing."""
    hosts = make_hosts(2)
    size, iters = 4 << 20, 5
    sent = {}
    for algorithm, axis in (("hierarchical", "all"), ("mesh", "all"), ("auto", "local")):
        job = run_on_hosts(hosts, 2, "traffic.py", timeout=200,
                           args=["--algorithm", algorithm, "--axis", axis, "--bytes", size,
                                 "--iters", iters])
        assert job.returncode == 0, clean(job.output)[-3000:]
        sent[algorithm, axis] = tx_per_host(job, 2, 2)
    payload = size * iters
    # Measured here: 1.002 and 2.004 (frame and TCP/IP headers; veth offloads segmentation).
    for tx in sent["hierarchical", "all"]:
        assert payload <= tx <= 1.05 * payload, (tx, payload)
    for tx in sent["mesh", "all"]:
        assert 2 * payload <= tx <= 2.1 * payload, (tx, payload)
    for tx in sent["auto", "local"]:
        assert tx < 0.01 * payload, tx  # heartbeats only: shared memory carries it all


@BOTH
@pytest.mark.parametrize("fault", ["kill-host", "link-down"])
def test_host_and_link_failures_end_in_errors(make_hosts, fault, transport):
    hosts = make_hosts(2)
    if fault == "kill-host":
        action = lambda: hosts.kill_host(1)  # noqa: E731
    else:
        action = lambda: hosts.set_link(0, 1, up=False)  # noqa: E731
    start = time.monotonic()
    job = run_on_hosts(hosts, 2, "faults.py", args=["loop"], timeout=120, when="LOOPING",
                       action=action, env={"JACCL_TIMEOUT": str(TIMEOUT), **transport},
                       grace=TIMEOUT + 20)
    out = clean(job.output)
    survivors = (0, 1) if fault == "kill-host" else (0, 1, 2, 3)
    for rank in survivors:
        raised = job.values(rank, "RAISED")
        assert raised, f"rank {rank} did not raise:\n{out[-4000:]}"
        seconds, message = raised[0].split(" ", 1)
        assert float(seconds) < TIMEOUT + 3, message
        if fault == "kill-host":  # a failed libfabric operation may be seen before the control link's close
            assert re.search(r"(closed|reset) by process [23] \(it exited|between device \d+ and "
                             r"device \d+ of process [23] failed", message), message
        else:
            assert re.search(r"timed out after 8 s .* waiting for rank|process \d failed", message), message
    assert job.returncode != 0
    assert time.monotonic() - start < 100
    assert job.shm_left() == []
