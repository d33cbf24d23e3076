"""Failures of hosts and links across emulated hosts (network namespaces, veth links), over
jaccl's TCP and over the OFI transport (libfabric's tcp provider, bound to each host's
address). The collective and MoE batteries across namespace hosts, and the bytes each
algorithm puts on the links, run as pytest-plugin jobs (tests/plugin/)."""

from __future__ import annotations

import json
import re
import time

import pytest

from harness import clean, run_job
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


def test_a_lost_process_0_comes_back_across_hosts(make_hosts, tmp_path):
    """jaccl-run --keep-going across hosts behind a command prefix runs JAX's coordination
    service in a helper on the first host (jax_jaccl/_service.py), not in process 0: losing
    process 0 (on that host) does not end the job. jaccl-run tells the service of the loss
    through the helper, so the others go on at once (JAX's heartbeat timeout is longer than
    the job), starts process 0 again, and it rejoins with the survivors' state: one set of
    parameters at the end, every world linked between the hosts over jaccl's TCP."""
    hosts = make_hosts(2)
    spec = hosts.hostfile(1)
    spec["hosts"][0]["processes"] = 2  # processes 0 and 1 on the first host, 2 on the second
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps(spec))
    # 32 steps, as test_recovery's processes that come back after the others went on: with 16
    # the survivors could finish (3.25 s after the loss) before process 0, started again 2 s
    # later, had imported JAX and linked its hosts, on a loaded machine (it then had nothing
    # to rejoin)
    args = ["--steps", "32", "--pace", "0.25", "--kill-at", "3", "--who", "0", "--rejoin"]
    job = run_job("elastic.py", 3, args=args, hostfile=str(hostfile), timeout=120,
                  keep_going=True, restarts=1,
                  env={"JACCL_HEARTBEAT_TIMEOUT": "60", "JACCL_DEBUG": "info",
                       "JACCL_TEST_RESTART_DELAY_S": "2"})
    out = clean(job.output)
    assert job.returncode == 0, out[-4000:]
    assert re.search(r"jaccl-run: process 0 was killed by SIGKILL at [\d.]+ s; starting it again "
                     r"\(--restarts\)", job.output), out[-3000:]
    assert "jaccl-run: 3 of 3 processes finished, 1 restarted" in job.output, out[-3000:]
    assert re.search(r"^rejoined at step \d+ with processes \[0, 1, 2\]$",
                     "\n".join(job.lines(0)), re.M), out[-3000:]
    for rank in (1, 2):
        text = "\n".join(job.lines(rank))
        assert "step 3 ran on 2 devices" in text, out[-3000:]  # at once, not at the heartbeat
        assert text.count("INFO between hosts: tcp") >= 3, out[-3000:]  # each world's links
    assert len({tuple(job.values(rank, "FINAL")) for rank in (0, 1, 2)}) == 1, out[-3000:]
    assert len(job.values(0, "FINAL")) == 1, out[-3000:]
    assert job.leftovers() == []
