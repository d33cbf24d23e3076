"""Failures of hosts and links across emulated hosts (network namespaces, veth links), over
jaccl's TCP and over the OFI transport (libfabric's tcp provider, bound to each host's
address). The collective and MoE batteries across namespace hosts, and the bytes each
algorithm puts on the links, run as pytest-plugin jobs (tests/plugin/)."""

from __future__ import annotations

import re
import time

import pytest

from harness import run_job
from transports import BOTH

TIMEOUT = 8  # JACCL_TIMEOUT for the fault tests


@BOTH
@pytest.mark.parametrize("fault", ["kill-host", "link-down"])
def test_host_and_link_failures_end_in_errors(make_hosts, fault, transport, tmp_path):
    hosts = make_hosts(2)
    if fault == "kill-host":
        action = lambda: hosts.kill_host(1)  # noqa: E731
    else:
        action = lambda: hosts.set_link(0, 1, up=False)  # noqa: E731
    start = time.monotonic()
    hostfile = hosts.write_hostfile(str(tmp_path / "hosts.json"), 2)
    job = run_job("faults.py", 4, hostfile=hostfile, args=["loop"], timeout=120, when="LOOPING",
                  action=action, env={"JACCL_TIMEOUT": str(TIMEOUT), **transport},
                  grace=TIMEOUT + 20)
    survivors = (0, 1) if fault == "kill-host" else (0, 1, 2, 3)
    for rank in survivors:
        seconds, message = job.raised(rank)
        assert seconds < TIMEOUT + 3, message
        if fault == "kill-host":  # a failed libfabric operation may be seen before the control link's close
            # or the other host's survivor relays it: "... process 3 failed: ... process 2 died"
            assert re.search(r"(closed|reset) by process [23] \(it exited|between device \d+ and "
                             r"device \d+ of process [23] failed|process [23] \(pid \d+\) died",
                             message), message
        else:
            assert re.search(r"timed out after 8 s .* waiting for rank|process \d failed", message), message
    assert job.returncode != 0
    assert time.monotonic() - start < 100
    assert job.leftovers() == []
