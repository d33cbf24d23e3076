"""The world after a lost process, or after one came back, under JAX's recoverability
(_bootstrap's contract, last point): whether a mesh's processes need another world, the next
generation over them, the world a process started again rejoins, and the facts these read from
JAX (which processes its last live_devices block reported, with which incarnation).

Contract:
- recoverable() says whether JAX's recoverability is on; the rest is asked only then.
- changed(world, live) says whether a program over the processes `live` needs a world other
  than `world`; next_generation(failed, live, in_program) releases `failed` and starts that
  world; rejoin(live) is the world a process started again (started_again()) joins. _bootstrap
  owns the world these replace (init(), its mpiabi library entries, under its lock) and starts each
  new world (_bootstrap._start()).
- refuse_lost_processes(devices, program), which _bootstrap installs after each compilation,
  refuses a program with collectives over devices of lost processes.
"""

from __future__ import annotations

import json
import time

import jax

from . import _bootstrap, _compat, _cuda_peers, _settings, _xla_collectives
from ._ext import engine


def recoverable() -> bool:
    """JAX's recoverability is on: processes do not share one fate (a lost one can be survived)."""
    return bool(getattr(jax.config, "jax_enable_recoverability", False))


def changed(world: _bootstrap.WorldInfo, live: tuple) -> bool:
    """Whether a program over the processes `live` (the mesh's) needs a world other than
    `world`: a process joined, or (after a failure) one was lost or came back."""
    joined = tuple(sorted(set(live) - set(world.members)))
    if joined:  # only processes JAX's live_devices reported live (not a mesh over the lost)
        return incarnations(joined) is not None
    if world.incarnations:  # a member started again (it may have died between two calls)
        now = incarnations(live)
        if now is not None and now != tuple(world.incarnations[world.members.index(p)] for p in live):
            return True
    return engine.aborted() and set(live) < set(world.members)


def live_incarnations() -> dict:
    """{process: JAX's incarnation} of every process the last multihost_utils.live_devices block
    reported live (a process started again gets a new incarnation), the same on every process;
    empty outside such blocks."""
    from jax.experimental import multihost_utils

    seen = getattr(multihost_utils.live_devices, "devices", None) or {}
    return {int(d.process_index): int(i) for d, i in seen.items()}


def incarnations(members: tuple) -> tuple | None:
    """live_incarnations() of each of `members`; None unless all of them are there."""
    by_process = live_incarnations()
    if not all(p in by_process for p in members):
        return None
    return tuple(by_process[p] for p in members)


def refuse_lost_processes(devices, program) -> None:
    """After each compilation in a job that recovers, with XLA's collectives on jaccl: refuses a
    program that runs collectives over devices of lost processes, those JAX's last
    multihost_utils.live_devices block did not report live and jaccl's world went on without
    (a mesh of jax.devices() after a loss, not of the live devices). XLA's collectives on jaccl
    would split its groups over the survivors: the mpiabi library refuses a group led by a lost
    device or missing one inside, but one that lacks only its last members looks whole to it (XLA
    tells it a group's first device and each member's rank, never its size; _xla_groups.py reads the
    groups of programs compiled before the loss for it), and the collective would run over the
    live members only. gloo waits for the lost ones for good. (A process
    lost since the world was last built is not known lost here: the program's first collective
    meets it and fails, as any would.)"""
    world, live = _bootstrap._world, live_incarnations()
    if world is None or not live:
        return
    processes = {int(d.process_index) for d in devices}
    lost = sorted(processes - set(live) - set(world.members))
    if lost and program.collectives:
        raise RuntimeError(
            f"jaccl: this program runs collectives over devices of processes {lost}, which "
            "were lost: run it over a mesh of the live devices (those "
            "multihost_utils.live_devices yields)")


def service_incarnations(members) -> dict:
    """{process: incarnation} of those of `members` JAX's coordination service counts live now.
    A meeting: it returns once every live one of `members` asked too (ask for this process
    alone, or where all of them ask at the same point)."""
    now = _compat.distributed_state().client.get_live_nodes(list(members))
    return {int(p): int(i) for p, i in now.items()}


def my_incarnation() -> int:
    """This process's incarnation, from JAX's coordination service."""
    me = jax.process_index()
    return service_incarnations([me])[me]


def started_again() -> bool:
    """Whether an earlier incarnation of this process started a world (so this one, started
    again, rejoins): the key _bootstrap._start() leaves for each, under JAX's recoverability."""
    if not recoverable() or jax.process_count() == 1:
        return False
    from ._kv import KeyValueStore

    mine, started = str(my_incarnation()), f"{_bootstrap._KV_PREFIX}/started/{jax.process_index()}/"
    return any(key.rsplit("/", 1)[-1] != mine for key, _ in KeyValueStore().dir(started))


def rejoin(live: tuple | None) -> _bootstrap.WorldInfo:
    """This process was lost and started again: it joins the world the others build over `live`
    (a mesh's processes, this one among them) at the generation the first of them that was not
    started again announced for exactly those processes with this incarnation of this one.
    `live` None (XLA's first collective here, with XLA's collectives on jaccl): the world
    announced with this incarnation, whatever its members."""
    from ._kv import KeyValueStore

    if _cuda_peers.local_gpus():
        raise RuntimeError("jaccl: a process started again cannot rejoin on GPUs")
    if live is None and not _xla_collectives.active():
        raise RuntimeError("jaccl: a process started again joins the others when a program is "
                           "lowered over a mesh of the live devices (multihost_utils.live_devices)")
    kv, me, mine = KeyValueStore(), jax.process_index(), my_incarnation()
    if live == (me,):  # no other process of a world, to announce one
        raise RuntimeError(f"jaccl: process {me}, started again, finds no other process live "
                           "to rejoin (they finished or were lost): a mesh over its own "
                           "devices alone has no world to join")
    prefix = _bootstrap._KV_PREFIX
    kv.delete(f"{prefix}/failed/{me}")  # what the last incarnation posted, if it raised
    first_tag = kv.get(f"{prefix}/job", _settings.current().timeout_s)
    deadline = time.monotonic() + _settings.current().timeout_s
    while True:
        for key, value in kv.dir(f"{prefix}/{first_tag}/worlds/"):
            world = json.loads(value)
            members = tuple(world["members"])
            if (live in (None, members) and me in members and  # None: XLA's first collective
                    world["incarnations"][members.index(me)] == mine):
                generation = int(key.rsplit("/", 1)[-1])
                joined = _bootstrap._start(members, generation, first_tag)
                engine.log_info(f"world generation {generation}: process {me} started again, "
                                f"rejoins processes {list(members)}")
                return joined
        if time.monotonic() > deadline:
            which = "" if live is None else f"of processes {list(live)} "
            raise TimeoutError(f"jaccl: process {me}, started again, found no world {which}with "
                               f"it within {_settings.current().timeout_s:.0f} s (do the others "
                               "run the same program over the same live devices?)")
        time.sleep(0.05)


def next_generation(failed: _bootstrap.WorldInfo, survivors: tuple,
                    in_program: bool = False) -> _bootstrap.WorldInfo:
    """The world after a lost process or one that came back: the last one released (its calls
    have all failed, or, when none failed, its programs ended, but for the one asking when
    `in_program`; its links closed), a new one
    started over `survivors` (JAX process indices, those that came back among them, every one
    of which builds it at the same point of the same program), renumbered 0..n-1 in that order,
    its key-value exchange, shared memory and TCP links its own (the job tag carries the
    generation)."""
    if _cuda_peers.local_gpus():
        raise RuntimeError("jaccl: going on without a lost process is not supported on GPUs")
    now = incarnations(survivors) or ()
    back = sorted(set(survivors) - set(failed.members)) + [  # joined, or started again in place
        p for p, i in zip(survivors, now) if p in failed.members and failed.incarnations and
        failed.incarnations[failed.members.index(p)] != i]
    engine.log_info(f"world generation {failed.generation + 1}: processes {list(survivors)} of "
                    f"{list(failed.members)} go on" + (f", {sorted(back)} back" if back else ""))
    if not engine.aborted() and not in_program:  # a process came back: programs end first
        _bootstrap._wait_for_device_programs()
    engine.shutdown()
    announcer = next(p for p in survivors if p not in back)  # this process at the latest
    world = _bootstrap._start(survivors, failed.generation + 1, failed.first_tag, announcer)
    if back and _xla_collectives.active():
        _xla_collectives.came_back()  # XLA's communicators are made again with those back
    return world
