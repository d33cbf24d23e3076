"""The collective battery on emulated hosts (loopback host ids) over each transport: results
equal jax.lax in the same job, and bitwise equal on every device of every process; over jaccl's
TCP and, where marked, over the OFI transport (libfabric's tcp provider). The one-host layouts
(2x1, 2x2, 4x1) run as pytest-plugin jobs in tests/plugin/test_battery_as_jobs.py, 1 x 4 in
tests/unit."""

from __future__ import annotations

import collections

import pytest

from harness import clean, run_job
from transports import OFI, OFI_MESSAGES, TCP, expected, needs_ofi


def layout(nprocs, devices, hosts, transport=TCP, marks=()):
    suffix = {id(OFI): "-ofi", id(OFI_MESSAGES): "-ofi-messages"}.get(id(transport), "")
    name = f"{nprocs}x{devices}" + (f"-{hosts}hosts" if hosts else "") + suffix
    return pytest.param(nprocs, devices, hosts, transport, id=name, marks=marks)


@pytest.mark.parametrize("nprocs, devices, hosts, transport", [
    # Emulated hosts on loopback (JACCL_HOST_ID per process): shared memory within a host,
    # TCP or libfabric between hosts, hierarchical where hosts hold several ranks.
    layout(2, 1, 2), layout(4, 1, 2), layout(2, 2, 2), layout(4, 1, 4),
    layout(2, 2, 2, OFI, needs_ofi), layout(4, 1, 4, OFI_MESSAGES, needs_ofi),
])
def test_collectives_match_lax_across_processes(nprocs, devices, hosts, transport):
    env = {"JACCL_TEST_FAKE_HOSTS": str(hosts), **transport} if hosts else {}
    job = run_job("collectives.py", nprocs, devices, env=env, timeout=400)
    out = clean(job.output)
    assert job.returncode == 0, out[-6000:]
    digests = collections.defaultdict(set)
    for rank in range(nprocs):
        assert job.values(rank, "STARTED") == [f"{rank} {nprocs}"], out[-3000:]
        assert job.values(rank, "WORLD") == [f"{max(hosts, 1)} hosts"], out[-3000:]
        assert job.values(rank, "TRANSPORT") == [expected(transport) if hosts else "none"], out[-3000:]
        assert job.lines(rank)[-1] == "DONE", out[-3000:]
        assert len(job.values(rank, "OK")) > 100
        for line in job.values(rank, "DIGEST"):
            name, _device, digest = line.rsplit(" ", 2)
            digests[name].add(digest)
    assert digests and all(len(d) == 1 for d in digests.values()), \
        {k: v for k, v in digests.items() if len(v) > 1}
    assert job.leftovers() == []


@pytest.mark.parametrize("nprocs, devices, hosts, transport", [
    layout(2, 2, 0), layout(4, 1, 2), layout(4, 1, 2, OFI, needs_ofi)])
def test_moe_matches_reference_across_processes(nprocs, devices, hosts, transport):
    env = {"JACCL_TEST_FAKE_HOSTS": str(hosts), **transport} if hosts else {}
    job = run_job("moe.py", nprocs, devices, env=env, timeout=400)
    out = clean(job.output)
    assert job.returncode == 0, out[-6000:]
    for rank in range(nprocs):
        assert job.values(rank, "TRANSPORT") == [expected(transport) if hosts else "none"], out[-3000:]
        assert job.lines(rank)[-1] == "DONE", out[-3000:]
        assert len(job.values(rank, "OK")) >= 30
    assert job.leftovers() == []
