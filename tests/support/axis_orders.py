"""Every collective that takes a tuple of mesh axes, over every order of two axes and of all
the axes of a mesh, against jax.lax in the same program (ragged_all_to_all against the numpy
model, the MoE ops against moe_reference, pbroadcast against jax.lax.all_gather: XLA:CPU
lowers neither jax.lax.ragged_all_to_all nor pbroadcast). The class of mistake it is there
for: a group's members numbered in another order than jax.lax numbers them, which moves the
right bytes to the wrong devices without an error (every device's block of the input differs,
so any such move shows).

jax.lax.ppermute (and pshuffle) numbers a tuple of axes out of the mesh's order in the mesh's
order up to jax 0.11.1 and refuses it later unless jax_raise_on_ppermute_sort_diff is off
(then in the tuple's order): the programs run as the installed jax runs them, and where jax
refuses, both must raise RuntimeError.

Contract: check_every_order(mesh, compare) runs in one process or in every process of a job,
and hands compare(name, got, want) the global arrays of each check (every device's result
stacked on a new leading axis); it returns the number of checks.
"""

from __future__ import annotations

import contextlib
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import jax_jaccl as jaccl
import moe_reference
import ragged_model
from jax_jaccl import lax as jlax

ROWS = 8  # per device: divisible by every group size of a mesh of 8 devices


def axis_orders(mesh) -> list[tuple]:
    """Every order of every two axes, and of all the axes when there are more than two."""
    names = mesh.axis_names
    orders = list(itertools.permutations(names, 2))
    if len(names) > 2:
        orders += list(itertools.permutations(names))
    return orders


def group_size(mesh, axes) -> int:
    return math.prod(mesh.shape[a] for a in axes)


def programs(L, axes, n):
    """{name: per-device program} of module L (jax.lax or jax_jaccl.lax) over `axes` (n
    members a group)."""
    pairs = [(i, (3 * i + 1) % n) for i in range(0, n, 2)]  # partial: every other member sends
    groups = [[i, n - 1 - i] if i % 2 == 0 else [n - 1 - i, i] for i in range(n // 2)]

    def pbroadcast(v):  # jax.lax.pbroadcast has no CPU lowering: its definition
        return L.pbroadcast(v, axes, 1) if L is jlax else jax.lax.all_gather(v, axes)[1]

    return {
        "psum": lambda v: L.psum(v, axes),
        "pmax": lambda v: L.pmax(v, axes),
        "all_gather": lambda v: L.all_gather(v, axes),
        "all_gather tiled axis 1": lambda v: L.all_gather(v, axes, axis=1, tiled=True),
        "psum_scatter": lambda v: L.psum_scatter(v, axes, tiled=True),
        "psum_scatter untiled": lambda v: L.psum_scatter(v.reshape(n, -1, v.shape[1]), axes),
        "all_to_all": lambda v: L.all_to_all(v, axes, 0, 0, tiled=True),
        "all_to_all 0->1": lambda v: L.all_to_all(v.reshape(n, -1, v.shape[1]), axes, 0, 1),
        "pswapaxes": lambda v: L.pswapaxes(v.reshape(n, -1, v.shape[1]), axes, 0),
        "ppermute cycle": lambda v: L.ppermute(v, axes, [(i, (i + 1) % n) for i in range(n)]),
        "ppermute partial": lambda v: L.ppermute(v, axes, pairs),
        "ppermute negative": lambda v: L.ppermute(v, axes, [(-1, 0), (0, -1)]),
        "pshuffle": lambda v: L.pshuffle(v, axes, [(3 * i + 1) % n for i in range(n)]),
        "pbroadcast": pbroadcast,
        "pmax groups": lambda v: L.pmax(v, axes, axis_index_groups=groups),
        "all_gather groups": lambda v: L.all_gather(v, axes, axis_index_groups=groups, tiled=True),
        "psum_scatter groups": lambda v: L.psum_scatter(v, axes, axis_index_groups=groups,
                                                        tiled=True),
        "all_to_all groups": lambda v: L.all_to_all(v, axes, 0, 0, axis_index_groups=groups,
                                                    tiled=True),
    }


PERMUTES = ("ppermute cycle", "ppermute partial", "ppermute negative", "pshuffle")


def global_array(mesh, full):
    """`full` ([devices * rows, ...]) split over every mesh axis, in the mesh's order."""
    return jax.make_array_from_callback(full.shape, NamedSharding(mesh, P(mesh.axis_names)),
                                        lambda i: full[i])


def run_stacked(mesh, fn, *args):
    """shard_map(fn) over every axis; every device's results stacked on a leading axis."""
    names = mesh.axis_names
    body = lambda *a: jax.tree.map(lambda r: r[None], fn(*a))  # noqa: E731
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(names),) * len(args),
                                 out_specs=P(names)))(*args)


def sort_flag():
    """jax's jax_raise_on_ppermute_sort_diff state (jax >= 0.11.2), or None."""
    from jax._src import config

    return getattr(config, "raise_on_ppermute_sort_diff", None)


@contextlib.contextmanager
def permutes_in_tuple_order():
    """jax_raise_on_ppermute_sort_diff off where this jax has it (a no-op where it has not)."""
    flag = sort_flag()
    if flag is None:
        yield
        return
    with flag(False):
        yield


def out_of_mesh_order(mesh, axes) -> bool:
    """Whether jax's groups over `axes` are not sorted (what jax 0.11.2 and later refuse in
    ppermute): some two axes of size > 1 in another order than the mesh's."""
    names = [a for a in axes if mesh.shape[a] > 1]
    return names != sorted(names, key=mesh.axis_names.index)


def check_refusals(mesh, axes, x) -> int:
    """Where this jax refuses a ppermute over `axes`, both modules raise RuntimeError."""
    if sort_flag() is None or not out_of_mesh_order(mesh, axes):
        return 0
    n = group_size(mesh, axes)
    for L in (jax.lax, jlax):
        try:
            run_stacked(mesh, programs(L, axes, n)["ppermute cycle"], x)
        except RuntimeError as e:
            assert "same order as the axis_names declared on the mesh" in str(e), e
        else:
            raise AssertionError(f"{L.__name__}.ppermute over {axes} ran where jax refuses it")
    return 1


def check_collectives(mesh, axes, compare) -> int:
    n = group_size(mesh, axes)
    devices = mesh.devices.size
    full = np.arange(devices * ROWS * 3, dtype=np.float32).reshape(devices * ROWS, 3) - 100
    x = global_array(mesh, full)
    with permutes_in_tuple_order():
        got = run_stacked(mesh, lambda v: {k: f(v) for k, f in programs(jlax, axes, n).items()}, x)
        want = run_stacked(mesh, lambda v: {k: f(v) for k, f in programs(jax.lax, axes, n).items()},
                           x)
    for name in got:
        compare(f"{name} over {axes}", got[name], want[name])
    return len(got) + check_refusals(mesh, axes, x)


def _coordinates(mesh):
    """[device in the mesh's order] -> {axis: position}."""
    shape = tuple(mesh.shape[a] for a in mesh.axis_names)
    return [dict(zip(mesh.axis_names, np.unravel_index(f, shape)))
            for f in range(math.prod(shape))]


def groups_in_rank_order(mesh, axes) -> list[list[int]]:
    """The groups over `axes` as lists of devices (their index in the mesh's order), each in
    jax.lax's rank order: the flattened index over `axes` in the tuple's order."""
    coords = _coordinates(mesh)
    sizes = [mesh.shape[a] for a in axes]
    groups: dict = {}
    for f, c in enumerate(coords):
        key = tuple(c[a] for a in mesh.axis_names if a not in axes)
        rank = int(np.ravel_multi_index([c[a] for a in axes], sizes))
        groups.setdefault(key, {})[rank] = f
    return [[g[r] for r in range(len(g))] for g in groups.values()]


def check_ragged(mesh, axes, compare, rng) -> int:
    """jaccl.ragged_all_to_all over `axes` against the numpy model of each group."""
    devices = mesh.devices.size
    n = group_size(mesh, axes)
    per_device = [None] * devices
    want = [None] * devices
    for group in groups_in_rank_order(mesh, axes):
        args = ragged_model.random_arguments(rng, n, 1, in_rows=12, out_rows=20, row_shape=(2,))
        results = ragged_model.ragged_all_to_all(*args)
        for rank, f in enumerate(group):
            per_device[f] = [a[rank] for a in args]
            want[f] = results[rank]
    columns = [np.stack(c) for c in zip(*per_device)]  # operands, outputs, then 4 index lists
    arrays = [global_array(mesh, c if k < 2 else c.astype(np.int32)) for k, c in enumerate(columns)]
    got = run_stacked(mesh, lambda *a: jlax.ragged_all_to_all(*(v[0] for v in a),
                                                              axis_name=axes), *arrays)
    compare(f"ragged_all_to_all over {axes}", got, global_array(mesh, np.stack(want)))
    return 1


def check_moe(mesh, axes, compare, rng) -> int:
    """moe_dispatch then moe_combine over `axes` against moe_reference (bitwise)."""
    devices = mesh.devices.size
    n = group_size(mesh, axes)
    tokens, hidden, k, experts, capacity = 6, 4, 2, 2 * n, 5
    x = global_array(mesh, rng.integers(-8, 8, (devices * tokens, hidden)).astype(np.float32))
    idx = np.stack([rng.choice(experts, size=k, replace=False) for _ in range(devices * tokens)])
    idx[rng.random(idx.shape) < 0.15] = -1
    idx = global_array(mesh, idx.astype(np.int32))
    w = global_array(mesh, (rng.integers(1, 8, (devices * tokens, k)) / 8).astype(np.float32))
    expert = lambda r: r * 2.0 + 1.0  # noqa: E731

    def ours(x, i, w):
        recv, count, handle = jaccl.moe_dispatch(x, i, w, num_experts=experts, capacity=capacity,
                                                 axis_name=axes)
        return recv, count, handle.dropped, jaccl.moe_combine(expert(recv), handle, w,
                                                               axis_name=axes)

    def theirs(x, i, w):
        recv, count, dropped = moe_reference.dispatch(x, i, num_experts=experts,
                                                      capacity=capacity, axis=axes)
        products, ok = moe_reference.pair_products(expert(recv), i, w, num_experts=experts,
                                                   capacity=capacity, axis=axes)
        return recv, count, dropped, products, ok

    recv, count, dropped, out = run_stacked(mesh, ours, x, idx, w)
    f_recv, f_count, f_dropped, products, ok = run_stacked(mesh, theirs, x, idx, w)
    # Summed in a program of its own, where XLA cannot fuse the products into the sums.
    combined = run_stacked(mesh, lambda p, o: moe_reference.accumulate(p[0], o[0], jnp.float32),
                           products, ok)
    for name, a, b in (("recv", recv, f_recv), ("count", count, f_count),
                       ("dropped", dropped, f_dropped), ("combine", out, combined)):
        compare(f"moe {name} over {axes}", a, b)
    return 4


def check_every_order(mesh, compare, seed=0, orders=None) -> int:
    """`orders` (default: axis_orders(mesh)) are the tuples of axes checked."""
    rng = np.random.default_rng(seed)
    checked = 0
    for axes in axis_orders(mesh) if orders is None else orders:
        checked += check_collectives(mesh, axes, compare)
        checked += check_ragged(mesh, axes, compare, rng)
        checked += check_moe(mesh, axes, compare, rng)
    return checked
