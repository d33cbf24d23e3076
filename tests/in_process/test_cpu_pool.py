"""_cpu_pool.make_room: NPROC is set only where the installed jaxlib deadlocks, the process plans
several devices and has fewer cores than they need; a value the user set stands, one jaccl set
earlier is raised for more devices; planned_devices() reads every place a count is asked for."""

from __future__ import annotations

import os

import pytest

from jax_jaccl import _cpu_pool


@pytest.fixture
def pool(monkeypatch):
    """make_room on an affected jaxlib with 2 cores, NPROC unset, nothing set by jaccl yet."""
    monkeypatch.delenv("NPROC", raising=False)
    monkeypatch.setattr(_cpu_pool, "jaxlib_version", lambda: (0, 10, 2))
    monkeypatch.setattr(_cpu_pool.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(_cpu_pool, "_set_here", [])
    yield monkeypatch
    os.environ.pop("NPROC", None)


def test_room_for_every_device_of_a_step_and_the_next_launches(pool):
    _cpu_pool.make_room(3)
    assert os.environ["NPROC"] == "8" == str(_cpu_pool.threads_for(3))
    _cpu_pool.make_room(2)  # never shrunk
    assert os.environ["NPROC"] == "8"
    _cpu_pool.make_room(4)  # raised where jaccl set it
    assert os.environ["NPROC"] == "10"


@pytest.mark.parametrize("case", ["one device", "enough cores", "fixed jaxlib", "user's NPROC"])
def test_nothing_changes_where_nothing_deadlocks_or_the_user_chose(pool, case):
    if case == "enough cores":
        pool.setattr(_cpu_pool.os, "sched_getaffinity", lambda pid: set(range(16)))
    if case == "fixed jaxlib":
        pool.setattr(_cpu_pool, "jaxlib_version", lambda: _cpu_pool.FIXED_IN)
    if case == "user's NPROC":
        pool.setenv("NPROC", "3")
    _cpu_pool.make_room(1 if case == "one device" else 4)
    assert os.environ.get("NPROC") == ("3" if case == "user's NPROC" else None)


def test_planned_devices_reads_the_environment_and_jax_config(monkeypatch):
    import jax

    for name in ("JACCL_LOCAL_DEVICES", "JAX_NUM_CPU_DEVICES", "XLA_FLAGS"):
        monkeypatch.delenv(name, raising=False)
    configured = jax.config.jax_num_cpu_devices
    baseline = max(1, configured if isinstance(configured, int) else 1)
    assert _cpu_pool.planned_devices() == baseline
    monkeypatch.setenv("JACCL_LOCAL_DEVICES", str(baseline + 1))
    assert _cpu_pool.planned_devices() == baseline + 1
    monkeypatch.setenv("JAX_NUM_CPU_DEVICES", str(baseline + 2))
    assert _cpu_pool.planned_devices() == baseline + 2
    monkeypatch.setenv("XLA_FLAGS", f"--xla_force_host_platform_device_count={baseline + 3} --x=1")
    assert _cpu_pool.planned_devices() == baseline + 3
