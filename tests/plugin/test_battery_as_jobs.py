"""The collective battery (tests/unit/process_battery.py: every collective against jax.lax,
several dtypes and shapes, each algorithm forced, a 2-D mesh) in multi-process layouts on one
host, as pytest-plugin jobs: plain assertions on every device of every process instead of a
worker script's `OK` lines. Layouts on emulated hosts over each transport stay in
tests/multiprocess/test_layouts.py and tests/multihost (their transports are set per job)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))


def layout(nprocs, devices):
    return pytest.param(nprocs, devices, id=f"{nprocs}x{devices}",
                        marks=pytest.mark.jax_processes(nprocs, devices_per_process=devices, timeout=280))


@pytest.mark.parametrize("nprocs, devices", [layout(2, 1), layout(2, 2), layout(4, 1)])
def test_collectives_match_lax(jax_job, nprocs, devices):
    from process_battery import assert_equal_shards, run_battery

    assert (jax_job.process_count, jax_job.local_device_count) == (nprocs, devices)
    checked = []

    def compare(name, got, want, digest=False):
        assert_equal_shards(name, got, want)
        checked.append(name)

    run_battery(compare, hierarchical=False)
    assert len(checked) > 100
