"""Every collective over every order of axes (tests/support/axis_orders.py) across processes,
as pytest-plugin jobs, against jax.lax in the same job (on JAX's own collectives): 2 processes
x 4 devices on one host, every order of two and three axes of a 2 x 4 and a 2 x 2 x 2 mesh
(the first axis spans the processes); 4 processes x 2 devices on 2 emulated hosts over jaccl's
TCP, the orders of all three axes of the 2 x 2 x 2 mesh (the first axis spans the hosts, the
second the processes of a host)."""

from __future__ import annotations

import itertools

import jax
import pytest

import jax_jaccl as jaccl
import axis_orders
from job_layouts import layout
from process_battery import assert_equal_shards


@pytest.mark.parametrize("nprocs, devices, hosts, transport", [layout(2, 4), layout(4, 2, 2)])
def test_every_collective_over_every_order_of_axes(jax_job, nprocs, devices, hosts, transport):
    assert (jax_job.process_count, jax_job.local_device_count) == (nprocs, devices)
    assert jaccl.init().host_count == hosts
    meshes = [jax.make_mesh((2, 2, 2), ("x", "y", "z"))]
    if hosts == 1:
        meshes.insert(0, jax.make_mesh((2, 4), ("x", "y")))
    for mesh in meshes:
        orders = (axis_orders.axis_orders(mesh) if hosts == 1
                  else list(itertools.permutations(mesh.axis_names)))
        assert axis_orders.check_every_order(mesh, assert_equal_shards, orders=orders) >= \
            len(orders) * 23
