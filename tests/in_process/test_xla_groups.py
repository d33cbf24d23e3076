"""After a lost process, XLA's collectives on jaccl split groups whose size XLA never tells the
mpiabi library; jax_jaccl._xla_groups reads every compiled program's groups so that a group of a
program compiled before the loss, missing only its last members, is refused, not summed over
the live members alone. Here: the groups it reads from this jax's HLO text (its printing
differs by version: lists on 0.10.2, meshes on 0.12.1) against the mesh's own, for every op
and every order of a tuple of axes over a mesh of permuted devices, as XLA's compiler hands
the program's devices over; and its verdict on the communicators the mpiabi library makes after a
loss (tests/processes/test_recovery.py runs it across processes)."""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

from jax_jaccl import _bootstrap, _xla_collectives, _xla_groups

AXES = ["a", "b", ("a", "b"), ("b", "a")]
OPS = {
    "psum": lambda v, axes: jax.lax.psum(v, axes),
    "all_gather": lambda v, axes: jax.lax.all_gather(v, axes, tiled=True),
    "psum_scatter": lambda v, axes: jax.lax.psum_scatter(v, axes, tiled=True),
    "all_to_all": lambda v, axes: jax.lax.all_to_all(v, axes, 0, 0, tiled=True),
}


def mesh_groups(mesh: Mesh, axes) -> set:
    """The mesh's groups over `axes`: the other axes fixed, the named ones in their order (the
    first the slowest), as device ids."""
    axes = (axes,) if isinstance(axes, str) else axes
    over = [mesh.axis_names.index(a) for a in axes]
    rest = [i for i in range(len(mesh.axis_names)) if i not in over]
    ids = np.vectorize(lambda d: d.id)(mesh.devices)
    size = int(np.prod([mesh.devices.shape[i] for i in over]))
    return {tuple(int(i) for i in row) for row in ids.transpose(rest + over).reshape(-1, size)}


def read_groups(monkeypatch, f, x) -> set:
    """The groups _xla_groups reads from f's compiled program, with the devices XLA's compile
    call gets (what after_each_compile hands its checks)."""
    from jax._src import compiler

    seen = []
    compile_or_get_cached = compiler.compile_or_get_cached

    def capture(backend, computation, devices, *args, **kwargs):
        executable = compile_or_get_cached(backend, computation, devices, *args, **kwargs)
        seen.append((list(devices.flat), executable))
        return executable

    monkeypatch.setattr(compiler, "compile_or_get_cached", capture)
    f.lower(x).compile()
    devices, executable = seen[-1]
    return set().union(*(_xla_groups.groups(devices, m.to_string())
                         for m in executable.hlo_modules()))


@pytest.fixture(scope="module")
def mesh():
    devices = np.array(jax.devices()[:4])[[2, 0, 3, 1]].reshape(2, 2)
    return Mesh(devices, ("a", "b"))


@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("op", list(OPS))
def test_the_groups_read_are_the_mesh_s(monkeypatch, mesh, op, axes):
    body = OPS[op]
    f = jax.jit(jax.shard_map(lambda v: body(v, axes), mesh=mesh, in_specs=P("a", "b"),
                              out_specs=P("a", "b")))
    assert read_groups(monkeypatch, f, jnp.zeros((8, 8), jnp.float32)) == mesh_groups(mesh, axes)


def test_a_collective_permute_s_group_is_all_the_program_s_devices(monkeypatch, mesh):
    f = jax.jit(jax.shard_map(lambda v: jax.lax.ppermute(v, "a", [(0, 1), (1, 0)]), mesh=mesh,
                              in_specs=P("a", "b"), out_specs=P("a", "b")))
    ids = tuple(int(d.id) for d in mesh.devices.flat)
    assert read_groups(monkeypatch, f, jnp.zeros((4, 4), jnp.float32)) == {ids}


def test_the_forms_xla_prints():
    devices = [types.SimpleNamespace(id=i) for i in (50, 30, 10, 0, 20, 40, 70, 60)]
    line = "%x = f32[1] all-reduce(f32[1] %p), channel_id=1, replica_groups={}, to_apply=%sum"
    forms = {"{{0,4,1,5},{2,6,3,7}}": {(50, 20, 30, 40), (10, 70, 0, 60)},
             "[2,4]<=[8]": {(50, 30, 10, 0), (20, 40, 70, 60)},
             "[4,2]<=[2,4]T(1,0)": {(50, 20), (30, 40), (10, 70), (0, 60)},
             "mesh['a'=2,'b'=2,'c'=2] {'c','a'}": {(50, 20, 30, 40), (10, 70, 0, 60)},
             "{}": {(50, 30, 10, 0, 20, 40, 70, 60)}}
    for form, want in forms.items():
        assert _xla_groups.groups(devices, line.replace("{}", form, 1)) == want, form
    for unknown in ("an unknown form", "mesh['a'=2,'b'=4] {'b':(2)2}", "mesh['a'=8] {'z'}",
                    "[2,4]<=[9]"):
        assert _xla_groups.groups(devices, line.replace("{}", unknown, 1)) == set(), unknown


@pytest.fixture
def after_loss(monkeypatch):
    """A world of process 0 alone (generation 1) in a job of processes 0, 1 and 2, each of two
    devices (ids 0-5); the groups kept and communicators made start empty; what the mpiabi library
    is handed is collected."""
    fake = [types.SimpleNamespace(id=i, process_index=i // 2) for i in range(6)]
    monkeypatch.setattr(jax, "devices", lambda *a: fake)
    monkeypatch.setattr(_bootstrap, "_world", types.SimpleNamespace(members=(0,), generation=1))
    monkeypatch.setattr(_xla_groups, "_recorded", set())
    monkeypatch.setattr(_xla_groups, "_made", (None, set()))
    refused = []
    monkeypatch.setattr(_xla_collectives, "group_refused", refused.append)

    def split(formed, split_round=0):
        del refused[:]
        _xla_groups.split_after_loss(formed, split_round)
        return refused[0] if refused else None
    return split


def test_the_live_members_of_a_group_compiled_before_the_loss_are_refused(after_loss):
    _xla_groups._recorded.update({(0, 1, 2, 3, 4, 5), (1, 0, 4)})
    why = after_loss((0, 1))
    assert why.startswith("jaccl: XLA makes the communicator of devices [0, 1], the live members "
                          "of a group of devices [0, 1, 2, 3, 4, 5] of a program compiled before "
                          "processes [1, 2] were lost: its collectives would run over the live "
                          "devices only: run programs over a mesh of the live devices"), why
    assert after_loss((1, 0)) is not None  # the kept group (1, 0, 4): its live members, refused


def test_a_group_of_live_devices_a_program_has_is_made_once_a_world(after_loss, monkeypatch):
    _xla_groups._recorded.update({(0, 1, 2, 3, 4, 5), (0, 1)})
    assert after_loss((0, 1)) is None  # the live program's own group, made first
    assert "a program also has a group of these devices alone" in after_loss((0, 1))
    assert after_loss((1, 0)) is not None  # no program has that order
    monkeypatch.setattr(_bootstrap, "_world", types.SimpleNamespace(members=(0,), generation=2))
    assert after_loss((0, 1)) is None  # a new world makes its communicators anew


def test_a_process_s_devices_make_one_communicator_in_one_split_round(after_loss):
    _xla_groups._recorded.update({(0, 1, 2, 3, 4, 5), (0, 1)})
    assert after_loss((0, 1), 7) is None
    assert after_loss((0, 1), 7) is None  # the process's other device, in the same round
    assert after_loss((0, 1), 8) is not None


def test_groups_of_live_devices_alone_or_with_live_members_elsewhere_pass(after_loss,
                                                                           monkeypatch):
    _xla_groups._recorded.update({(0, 1, 2, 3), (2, 3, 0, 1)})
    monkeypatch.setattr(_bootstrap, "_world", types.SimpleNamespace(members=(0, 1),
                                                                    generation=1))
    assert after_loss((0, 1, 2, 3)) is None
    assert after_loss((2, 3)) is None  # no kept group is it and lost devices alone
    monkeypatch.setattr(_bootstrap, "_world", None)
    assert after_loss((0,)) is None  # no world: nothing to tell
