"""XLA's groups of devices, read from each program as it compiles, and the check of a group
that XLA's collectives on jaccl make after a lost process.

XLA tells MPI_Comm_split a group's first device and each member's rank, never the group's
size. After a loss, a program compiled before it whose group held the lost process's devices
at its end only splits into its live members: a group the mpiabi library finds whole, over which the
collective would sum the live devices alone (gloo waits for the lost ones for good). So the
groups of every program are read as it compiles (replica_groups as XLA prints them:
`{{0,1},{2,3}}`, `[2,2]<=[4]`, `[2,2]<=[2,2]T(1,0)`, `mesh['x'=2,'y'=2] {'y'}`; the ids index
the program's devices; a collective-permute's group is taken as all of them), and the mpiabi library
asks, each time it makes a communicator of MPI_COMM_WORLD in a world that lacks processes,
whether what it made is what is left of such a group. It is refused when it is, unless a
program has a group of exactly these devices in this order too and no communicator of them was
made in this world yet (XLA makes one per group and keeps it: a second is a larger group's
remains). Where the first made is the larger group's remains and the program with the smaller
one runs after, that program's split is refused instead: one wrong sum, then an error. A form
not read here (sub-axes, say) keeps no group: reading never fails a compilation.

Contract:
- line_groups(line) is one collective line's groups as lists of ids (None: every device;
  ValueError: a form not read here), also what _mpi_counts reads an all-to-all's size from.
- groups(devices, module_text) is the set of groups (tuples of device ids, in XLA's order) of
  the collectives in HLO text (a module, or its collectives' lines) of a program whose devices
  are `devices` (devices.flat of its compilation).
- record(devices, program) is an _compat.after_each_compile check: it keeps the groups of
  `program` (an _compat.CompiledProgram); install() adds it (once). jaccl-run's processes get
  it as jax loads (_cluster.py), the others when jaccl attaches the mpiabi library (_bootstrap.py).
- split_after_loss(formed, split_round) is what the mpiabi library runs (on an XLA thread) once it
  made the communicator `formed` (device ids by rank) of MPI_COMM_WORLD in a world that lacks
  processes (`split_round`: the split round that made it with several devices per process, 0
  with one): it hands the mpiabi library why it refuses it (_xla_collectives.group_refused()), else
  nothing. It never raises.
"""

from __future__ import annotations

import math
import re
import threading

import numpy as np

from . import _compat

_REPLICA_GROUPS = re.compile(
    r"replica_groups=(\{\}|\{\{[\d,{}]*\}\}|\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?|"
    r"mesh\[[^\]]*\](?:\s*<=\[[\d,]+\](?:T\([\d,]+\))?)?\s*\{[^}]*\})")
_IOTA = re.compile(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")

_lock = threading.Lock()
_recorded: set = set()  # every group of every program compiled so far, as device ids
_made: tuple = (None, set())  # (world generation, {(group, split round)} made in it)


def _ints(text: str) -> list:
    return [int(v) for v in text.split(",") if v]


def _iota(text: str) -> np.ndarray:
    """`[dims]<=[reshape]T(perm)`: arange over reshape's dims, transposed, as dims."""
    dims, reshape, perm = _IOTA.fullmatch(text.strip()).groups()
    ids = np.arange(math.prod(_ints(reshape))).reshape(_ints(reshape))
    if perm:
        ids = ids.transpose(_ints(perm))
    return ids.reshape(_ints(dims))


def _id_groups(text: str):
    """The groups of one replica_groups value, as lists of ids; None for an empty one (every
    device)."""
    if text == "{}":
        return None
    if text.startswith("{{"):
        return [_ints(g) for g in re.findall(r"\{([\d,]*)\}", text[1:-1])]
    if text.startswith("mesh"):
        axes_text, order, listed = re.fullmatch(
            r"mesh\[([^\]]*)\]\s*(<=\[[\d,]+\](?:T\([\d,]+\))?)?\s*\{([^}]*)\}", text).groups()
        axes = [(name, int(size)) for name, size in re.findall(r"'([^']+)'=(\d+)", axes_text)]
        sizes = [size for _, size in axes]
        ids = (_iota(f"[{','.join(map(str, sizes))}]{order}") if order
               else np.arange(math.prod(sizes)).reshape(sizes))
        names = [name for name, _ in axes]
        named = re.findall(r"'([^']+)'", listed)
        if re.sub(r"'[^']+'|[\s,]", "", listed) or not set(named) <= set(names):
            raise ValueError(f"a mesh group not read here: {{{listed}}}")
        over = [names.index(a) for a in named]
        rest = [i for i in range(len(names)) if i not in over]
        size = math.prod(sizes[i] for i in over)
        return ids.transpose(rest + over).reshape(-1, size).tolist()
    return _iota(text).tolist()


def line_groups(line: str):
    """The groups of one collective's HLO line, as lists of ids (the program's device indexes);
    None where it names none (every device). ValueError for a form not read here."""
    given = _REPLICA_GROUPS.search(line)
    if given is None:
        if "replica_groups=" in line:
            raise ValueError("replica_groups in a form not read here")
        return None
    return _id_groups(given.group(1))


def groups(devices, module_text: str) -> set:
    ids = [int(d.id) for d in devices]
    found = set()
    for line in module_text.splitlines():
        op = _compat._COLLECTIVE_OP.search(line)
        if not op:
            continue
        try:
            listed = line_groups(line)
        except ValueError:
            continue  # a form not read here: no group kept
        if listed is None or op.group(1) == "collective-permute":
            found.add(tuple(ids))
            continue
        for group in listed:
            if group and max(group) < len(ids):  # else replicas (pmap): not read here
                found.add(tuple(ids[i] for i in group))
    return found


def record(devices, program) -> None:
    if not program.collectives:
        return
    try:
        found = groups(devices, "\n".join(program.collectives))
    except Exception as e:  # noqa: BLE001 - never the compilation's error
        from ._ext import engine

        engine.log_info(f"XLA's groups of a program not read: {type(e).__name__}: {e}")
        return
    with _lock:
        _recorded.update(found)


def install() -> None:
    _compat.after_each_compile(record)


def _shown(ids) -> str:
    ids = list(ids)
    return str(ids) if len(ids) <= 8 else f"[{', '.join(map(str, ids[:8]))}, ... ({len(ids)})]"


def _verdict(formed: tuple, split_round: int):
    """Why the communicator `formed`, made in the world now attached, is refused; or None."""
    global _made
    import jax

    from . import _bootstrap

    world = _bootstrap._world
    if world is None:
        return None
    process_of = {int(d.id): int(d.process_index) for d in jax.devices()}
    absent = {d for d, p in process_of.items() if p not in world.members}
    mine = set(formed)
    with _lock:
        larger = sorted(g for g in _recorded if mine < set(g) and set(g) - mine <= absent)
        exact = formed in _recorded
        if _made[0] != world.generation:
            _made = (world.generation, set())
        made = _made[1]
        again = any(g == formed and (split_round == 0 or r != split_round) for g, r in made)
        if not larger or (exact and not again):
            made.add((formed, split_round))
            return None
    group = larger[0]
    lost = sorted({process_of[d] for d in group if d in absent})
    why = (f"jaccl: XLA makes the communicator of devices {_shown(formed)}, the live members "
           f"of a group of devices {_shown(group)} of a program compiled before processes "
           f"{lost} were lost: its collectives would run over the live devices only")
    if exact:
        why += (" (a program also has a group of these devices alone, and XLA made its "
                "communicator in this world already: it makes one per group, so this is the "
                "larger group)")
    return why + (": run programs over a mesh of the live devices (those "
                  "multihost_utils.live_devices yields), compiled after the loss")


def split_after_loss(formed, split_round: int = 0) -> None:
    from . import _xla_collectives

    try:
        why = _verdict(tuple(int(d) for d in formed), int(split_round))
    except Exception as e:  # noqa: BLE001 - never raised into mpiabi: the split goes on unchecked
        from ._ext import engine

        engine.log_info(f"the check of XLA's group {list(formed)} after a loss failed: "
                        f"{type(e).__name__}: {e}")
        return
    if why:
        _xla_collectives.group_refused(why)
