"""Every collective over every order of two and three axes of a 2 x 4 and a 2 x 2 x 2 mesh
(tests/support/axis_orders.py) across processes, as a pytest-plugin job of 2 processes x 4
devices (the first axis spans the processes), against jax.lax in the same job (on JAX's own
collectives). Across hosts, with ranks dealt round-robin: tests/plugin/test_battery_as_jobs.py."""

from __future__ import annotations

import jax
import pytest

import axis_orders
from process_battery import assert_equal_shards


@pytest.mark.jax_processes(2, devices_per_process=4, xla_collectives="gloo", timeout=400)
def test_every_collective_over_every_order_of_axes(jax_job):
    assert (jax_job.process_count, jax_job.local_device_count) == (2, 4)
    for shape in ((2, 4), (2, 2, 2)):
        mesh = jax.make_mesh(shape, ("x", "y", "z")[:len(shape)])
        orders = len(axis_orders.axis_orders(mesh))
        assert axis_orders.check_every_order(mesh, assert_equal_shards) >= orders * 23
