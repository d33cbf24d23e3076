"""Every collective over every order of a tuple of mesh axes, one process x 4 devices, against
jax.lax (tests/support/axis_orders.py): a 2 x 2 mesh, and a 2 x 2 x 1 mesh whose size-1 axis
leaves the order of the others alone. Meshes of 8 devices (2 x 4, 2 x 2 x 2), with groups
inside a process and across processes: tests/plugin/test_axis_orders_as_jobs.py; across hosts,
ranks dealt round-robin: tests/plugin/test_battery_as_jobs.py."""

from __future__ import annotations

import itertools

import jax
import pytest

import axis_orders
from process_battery import assert_equal_shards


def test_every_collective_over_every_order_of_two_axes():
    mesh = jax.make_mesh((2, 2), ("x", "y"))
    checked = axis_orders.check_every_order(mesh, assert_equal_shards)
    assert checked == 2 * (len(axis_orders.programs(jax.lax, ("x",), 2)) + 5) + refused(mesh, axis_orders.axis_orders(mesh))


def test_every_order_of_three_axes_one_of_size_one():
    """The size-1 axis numbers nothing: jax refuses ("z", "y", "x") for the order of y and x
    alone, and takes ("x", "z", "y")."""
    mesh = jax.make_mesh((2, 2, 1), ("x", "y", "z"))
    orders = list(itertools.permutations(mesh.axis_names))
    checked = axis_orders.check_every_order(mesh, assert_equal_shards, orders=orders)
    assert checked == 6 * (len(axis_orders.programs(jax.lax, ("x",), 2)) + 5) + refused(mesh, orders)


def refused(mesh, orders) -> int:
    """How many of `orders` the installed jax refuses in ppermute."""
    if axis_orders.sort_flag() is None:
        return 0
    return sum(axis_orders.out_of_mesh_order(mesh, a) for a in orders)


def test_the_order_a_permute_over_reordered_axes_numbers_members_in():
    """The rule the checks above hold jaccl to, computed by hand: on a 2 x 2 mesh ("x", "y"),
    ppermute over ("y", "x") of the pair (0, 1) sends device (x=0, y=0)'s block to member 1,
    which is (x=0, y=1) in the mesh's order (jax before 0.11.2) and (x=1, y=0) in the
    tuple's (later jax, jax_raise_on_ppermute_sort_diff off; on, both refuse)."""
    import numpy as np
    from jax_jaccl import lax as jlax

    mesh = jax.make_mesh((2, 2), ("x", "y"))
    x = axis_orders.global_array(mesh, np.arange(1.0, 5.0, dtype=np.float32)[:, None])
    run = lambda L: np.asarray(axis_orders.run_stacked(  # noqa: E731
        mesh, lambda v: L.ppermute(v, ("y", "x"), [(0, 1)]), x)).ravel()
    with axis_orders.permutes_in_tuple_order():
        got = [run(L) for L in (jax.lax, jlax)]
    receiver = 1 if axis_orders.sort_flag() is None else 2  # in the mesh's order: (0, 1), (1, 0)
    want = np.zeros(4, np.float32)
    want[receiver] = 1.0
    for result in got:
        np.testing.assert_array_equal(result, want)
    if axis_orders.sort_flag() is not None:
        for L in (jax.lax, jlax):
            with pytest.raises(RuntimeError, match="same order as the axis_names"):
                run(L)
