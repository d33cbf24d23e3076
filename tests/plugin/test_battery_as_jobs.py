"""The collective battery (tests/unit/process_battery.py: every collective against jax.lax,
several dtypes and shapes, each algorithm forced, a 2-D mesh) in multi-process layouts on one
host, as pytest-plugin jobs: plain assertions in every process instead of a worker script's
`OK` lines. Plus the same battery over 2 emulated hosts (network namespaces as root, loopback
host ids otherwise) with the hierarchical algorithm. Layouts on emulated hosts over each
transport stay in tests/multiprocess/test_layouts.py (their transports are set per job)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))


def layout(nprocs, devices, hosts=1):
    name = f"{nprocs}x{devices}" + (f"-{hosts}hosts" if hosts > 1 else "")
    return pytest.param(nprocs, devices, hosts, id=name,
                        marks=pytest.mark.jax_processes(nprocs, devices_per_process=devices, hosts=hosts,
                                                        timeout=280))


@pytest.mark.parametrize("nprocs, devices, hosts", [layout(2, 1), layout(2, 2), layout(4, 1), layout(4, 2, 2)])
def test_collectives_match_lax(jax_job, nprocs, devices, hosts):
    import jax

    import jax_jaccl as jaccl
    from process_battery import assert_equal_shards, run_battery

    assert (jax_job.process_count, jax_job.local_device_count, jax_job.host_count) == (nprocs, devices, hosts)
    assert jaccl.init().host_count == hosts
    checked = []

    def compare(name, got, want, digest=False):
        assert_equal_shards(name, got, want)
        checked.append(name)

    run_battery(compare, hierarchical=hosts > 1 and jax.device_count() // hosts > 1)
    assert len(checked) > 100
    if hosts > 1:
        assert any(name.startswith("all_reduce/hierarchical") for name in checked)
