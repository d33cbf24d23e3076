"""Starts the engine's world: which devices and processes exist, who shares a host, and the
shared memory between processes of a host.

Contract:
- init() is idempotent and thread-safe; ops call it when they are first lowered, so users
  need not. In a multi-process job it must run after jax.distributed.initialize(), and every
  process must reach it (each process lowers the same program, so they do).
- Settings come from _settings.current() (read once per process); init() hands the engines
  their part first, and every process compares the ones that must agree (_settings.VARIABLES'
  `agree`) before any connection is made: a difference stops every process, naming it. The
  TCP listener binds to JACCL_IFNAME's address (default: the interface that reaches JAX's
  coordinator), never 0.0.0.0.
- Processes exchange their facts through JAX's key-value store (with a TCP endpoint and a
  per-job secret that TCP connections must prove); each process of a host creates one segment
  (/dev/shm/jaccl-<job>-<process>, mode 0600), maps its host peers' segments and unlinks its
  own as soon as all of them have mapped it, so nothing is left in /dev/shm even if a process
  is killed later.
- With JAX's recoverability on (jax_enable_recoverability), after a lost process (the world
  aborted), a program lowered over a mesh of fewer of the world's processes (the survivors
  JAX's live_devices reported) gets a new world over those processes: a generation,
  renumbered 0..n-1 in JAX's process order, with its own key-value space, job tag
  ("<job>-g<generation>"), segments and links. Likewise when a lost process comes back (JAX
  reports it live again, with a new incarnation): a program lowered over a mesh that
  includes its devices gets a new world over the survivors and it; the process started again
  finds that world's generation among those the world's first process announced
  (_recovery.py holds what is done after a loss or a comeback; this module the world's owner).
  XLA's collectives on jaccl (the mpiabi library) get the survivors' world when XLA makes a
  communicator for their devices (renew_after_loss()), also with several CPU devices per
  process. Not on GPUs, nor with XLA's collectives on jaccl and a process that rejoins (a
  clear error). A world after a loss that could not be built is refused from then on (every
  later init() says why) until every process calls shutdown(). Process 0 then leaves last
  (_leave_together()).
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import secrets
import socket
import threading
import time

import jax

from . import (_compat, _cuda_peers, _mpi_counts, _recovery, _settings, _xla_collectives,
               _xla_groups, _transport, _uncaught)
from ._ext import cuda_engine, engine

_lock = threading.Lock()
_world: "WorldInfo | None" = None

_KV_PREFIX = "jaccl/v1"
_shutdowns = 0  # jaccl.shutdown() calls so far: a world started after one meets in a space of its own
# Why the world after a lost process could not be built (_renew()): every later init() raises
# it (the world's first generation cannot be started again in the same job).
_no_next_world: "str | None" = None


@dataclasses.dataclass(frozen=True)
class WorldInfo:
    process_index: int
    process_count: int
    job_tag: str
    hosts: tuple[str, ...]  # host id of every process
    endpoints: tuple[str, ...]  # TCP listener of every process ("ip:port"), "" in one process
    settings: _settings.Settings
    transport: str = "tcp"  # between hosts: "tcp", or "ofi:<provider>"; "none" on one host
    members: tuple[int, ...] = ()  # JAX's process index of each process of the world, in order
    generation: int = 0  # worlds this process built after a lost process (0: the first)
    first_tag: str = ""  # the first world's job tag (the job's): later ones add "-g<generation>"
    incarnations: tuple = ()  # JAX's incarnation of each member, where live_devices said (else empty)

    @property
    def host_count(self) -> int:
        return len(set(self.hosts))


def host_id() -> str:
    """Processes with the same id can share memory: same machine, same network namespace."""
    explicit = _settings.current().host_id
    if explicit:
        return explicit
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "noboot"
    try:
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        netns = 0
    return f"{socket.gethostname()}/{boot}/{netns}"


def init(devices=None) -> WorldInfo:
    """Initialises jax_jaccl for this process (idempotent) and returns what it found.
    `devices` (a mesh's, as a program is lowered over it): with JAX's recoverability on, when
    the world has failed (a process was lost) and they belong to fewer of its processes, or
    when they belong to a process that came back (live again, or with a new incarnation), the
    world is released and a new one is built over their processes
    (_recovery.next_generation()); a process started again joins it (_recovery.rejoin()).
    Programs compiled for the earlier world raise if run again: a program over the same devices
    must be traced again (a new jax.jit)."""
    global _world
    with _lock:
        if _no_next_world is not None:
            raise RuntimeError(_no_next_world)
        live = None if devices is None else tuple(sorted({int(d.process_index) for d in devices}))
        if _world is not None and live is not None and _recovery.recoverable():
            _renew(live)
        if _world is None:
            _world = _recovery.rejoin(live) if _recovery.started_again() else _start()
            atexit.register(_at_exit)
            if _world.process_count > 1:
                _uncaught.install()  # also where jax.distributed.initialize() was called directly
        return _world


def _renew(live: tuple, in_program: bool = False) -> None:
    """Under _lock, JAX's recoverability on: the next world over the processes `live` when
    this process is one of them and they need one (_recovery.changed()); `in_program`: asked
    from inside a running device program (XLA's collective, through the mpiabi library)."""
    global _world, _no_next_world
    if jax.process_index() in live and _recovery.changed(_world, live):
        failed, _world = _world, None  # if the new world fails to start: none, for good
        try:
            _world = _recovery.next_generation(failed, live, in_program)
        except BaseException as e:
            _no_next_world = (f"jaccl: no world over processes {list(live)} after generation "
                              f"{failed.generation} ({type(e).__name__}: {e})")
            raise


def _space(first_tag: str, generation: int, members: tuple) -> str:
    """Where a world's processes meet in the key-value store: the job's first world at the
    root, one started again after jaccl.shutdown() (every process shuts down as often) under
    the count of shutdowns, a world after a lost process under its generation."""
    if generation == 0:
        return _KV_PREFIX if _shutdowns == 0 else f"{_KV_PREFIX}/again/{_shutdowns}"
    return f"{_KV_PREFIX}/{first_tag}/generation/{generation}/{'.'.join(map(str, members))}"


def _at_exit() -> None:
    # After a collective failed (a peer died, ranks disagreed, a deadline passed) the job is
    # broken: jax.distributed's shutdown barrier would wait for the dead peer and then abort
    # the process. End at once with status 1 instead (our hook runs before jax's).
    world = _world
    gpu_failed = cuda_engine is not None and cuda_engine.any_failure()
    if world is not None and world.process_count > 1 and (engine.aborted() or gpu_failed):
        _uncaught.end_process(world.process_index)
    _wait_for_device_programs()
    shutdown()
    if world is not None and world.process_count > 1 and _recovery.recoverable():
        _leave_together(world)


def _leave_together(world: WorldInfo) -> None:
    """With JAX's recoverability on, its shutdown barrier no longer holds the processes
    together (recoverable tasks skip it), and a process whose shutdown reaches JAX's
    coordination service after process 0, its host, exited is aborted: process 0 leaves last,
    once every other process of the world said it is leaving (or JACCL_TIMEOUT passed), and a
    moment after."""
    from ._kv import KeyValueStore

    kv = KeyValueStore()
    prefix = f"{_space(world.first_tag, world.generation, world.members)}/{world.job_tag}/leaving"
    try:
        kv.set(f"{prefix}/{world.process_index}", "1")
        if jax.process_index() == 0:
            for p in range(1, world.process_count):
                kv.get(f"{prefix}/{p}", world.settings.timeout_s)
            time.sleep(_uncaught._COORDINATOR_GRACE_S)
    except Exception:  # noqa: BLE001 - a survivor lost at the end: leave anyway
        pass


def _wait_for_device_programs() -> None:
    """Lets the device programs still in flight finish before the engine goes: a program whose
    result was read from one device only (out_specs=P()) may still run on the others."""
    try:
        jax.block_until_ready(jax.live_arrays())
    except Exception:  # noqa: BLE001 - a failed program has reported its error already
        pass


def is_initialized() -> bool:
    return _world is not None


def shutdown() -> None:
    """Releases the engine (shared memory mappings, sockets, threads). Executables compiled
    before cannot run afterwards (they raise, saying so); a program lowered afterwards (jax
    may lower a jitted function again when it is called) starts the engine again, as init()
    does (in a multi-process job every process must then do so)."""
    global _world, _shutdowns, _no_next_world
    with _lock:
        if _no_next_world is not None:  # every process shutting down may start a world again
            engine.shutdown()  # the failed world, if the new one failed before releasing it
            _no_next_world = None
            _shutdowns += 1
        if _world is not None:
            if cuda_engine is not None:  # staged GPU jobs still queued use the engine
                cuda_engine.drain(_world.settings.timeout_s)
            engine.shutdown()
            _world = None
            _shutdowns += 1


def _start(members: tuple | None = None, generation: int = 0, first_tag: str = "",
           announcer: int | None = None) -> WorldInfo:
    """A world over `members` (JAX process indices; default all), `generation` worlds after
    the first (whose job tag was `first_tag`); process `announcer` announces it (_announce)."""
    settings = _settings.current()
    _settings.hand_to_engines(settings)
    if generation == 0:
        for name in _settings.unknown():
            engine.log_warning(f"{name} is not a jaccl setting (see docs/settings.md); ignored")
    members = tuple(range(jax.process_count())) if members is None else members
    me, count = members.index(jax.process_index()), len(members)
    device_table = [(int(d.id), members.index(d.process_index)) for d in jax.devices()
                    if d.process_index in members]
    xla_collectives = "jaccl" if _xla_collectives.active() else "gloo"
    space = _space(first_tag, generation, members)
    incarnations = (_announce(members, generation, first_tag, announcer)
                    if count > 1 and _recovery.recoverable() else None)
    mine = {"pid": os.getpid(), "host": host_id(),
            "settings": dict(settings.agreed(), JACCL_XLA_COLLECTIVES=xla_collectives),
            "gpus": len(_cuda_peers.local_gpus())}
    transport = _transport.Choice("none", "", "one process")
    if count == 1:
        infos = [mine]
        job_tag = settings.job_id or secrets.token_hex(6)
        secret = secrets.token_hex(16)
    else:
        ip = _listen_address()
        mine["tcp"] = f"{ip}:{engine.tcp_listen(ip)}"
        transport = _transport.choose(settings)
        mine["transport"] = transport.label
        infos, job_tag, secret = _exchange(space, me, count, mine, settings.timeout_s,
                                           f"{first_tag}-g{generation}" if generation else "")
        _transport.check_agreement([info["transport"] for info in infos])
    hosts = tuple(info["host"] for info in infos)
    if len(set(hosts)) == 1:
        transport = _transport.Choice("none", "", "one host")
    on_my_host = sum(1 for _, p in device_table if hosts[p] == hosts[me])
    spin = settings.spin_us
    if spin is None:
        spin = 50 if on_my_host <= (os.cpu_count() or 1) else 0
    xla_streams = xla_collectives == "jaccl" and _xla_collectives.shares_channels(
        sum(1 for _, p in device_table if p == me))
    engine.init_world(
        my_process=me,
        processes=[(i, int(info["pid"]), info["host"], members[i])  # members: jax's numbers
                   for i, info in enumerate(infos)],
        devices=device_table,
        job_tag=job_tag,
        payload_bytes=settings.frame_bytes,
        num_slots=settings.slots,
        timeout_s=settings.timeout_s,
        spin_us=spin,
        endpoints=[info.get("tcp", "") for info in infos],  # noqa: E501
        secret=secret,
        tcp_stripes=settings.tcp_sockets,
        transport=transport.transport,
        ofi_provider=transport.provider,
        ofi_why=transport.why,
        ofi_mode=transport.mode,
        # Lanes (xla_ffi/comm/lanes.h) and XLA's collectives with several devices per process
        # both need several streams per channel; only the latter streams of XLA's own.
        shared_channels=settings.lanes > 1 or xla_streams,
        xla_streams=xla_streams,
        evict_stalled=settings.evict_stalled,
    )
    if transport.transport != "none":
        engine.log_info(f"between hosts: {transport.label} ({transport.why})")
    if cuda_engine is not None:  # CUDA handlers name devices by ordinal: map them to global ids
        cuda_engine.set_device_ids([(int(d.local_hardware_id), int(d.id))
                                    for d in jax.local_devices() if d.platform == "gpu"])
    try:
        if count == 1:
            engine.attach_peers()
        else:
            if transport.transport == "ofi":
                from ._kv import KeyValueStore

                _transport.exchange(KeyValueStore(), f"{space}/{job_tag}", me, hosts,
                                    settings.timeout_s)
            _attach(f"{space}/{job_tag}", me, hosts, settings.timeout_s)
        _cuda_peers.setup(me, infos, hosts, f"{space}/{job_tag}", settings.timeout_s)
    except BaseException:
        engine.shutdown()
        raise
    if xla_collectives == "jaccl":  # XLA:CPU's own collectives run on this world from here on
        try:
            _xla_collectives.attach()
            _mpi_counts.install()
            _xla_groups.install()
            if _recovery.recoverable():
                _xla_collectives.recoverable()
                _compat.after_each_compile(_recovery.refuse_lost_processes)
        except BaseException:
            engine.shutdown()
            raise
    endpoints = tuple(info.get("tcp", "") for info in infos)
    if incarnations is not None:  # an incarnation of this process started a world: a later one rejoins
        from ._kv import KeyValueStore

        started = f"{_KV_PREFIX}/started/{jax.process_index()}/{_recovery.my_incarnation()}"
        KeyValueStore().set(started, "1", overwrite=True)
    return WorldInfo(me, count, job_tag, hosts, endpoints, settings, transport.label, members,
                     generation, first_tag or job_tag, incarnations or ())


def _announce(members: tuple, generation: int, first_tag: str, announcer: int | None) -> tuple:
    """The members' incarnations (empty where unknown); process `announcer` (the first member
    that was not started again: process 0 may be one that was) announces a later generation
    with them, for a member that was started again to find (_recovery.rejoin()). The first world may
    start outside any live_devices block (XLA's collectives on jaccl start it in
    jax_jaccl.distributed.initialize()): its incarnations are then the coordination service's,
    so that a member started again in its place is seen as one."""
    incarnations = _recovery.incarnations(members) or ()
    if not incarnations and generation == 0:
        now = _recovery.service_incarnations(members)
        incarnations = tuple(now[p] for p in members) if all(p in now for p in members) else ()
    if generation > 0 and jax.process_index() == announcer and incarnations:
        from ._kv import KeyValueStore

        KeyValueStore().set(f"{_KV_PREFIX}/{first_tag}/worlds/{generation}",
                            json.dumps({"members": list(members), "incarnations": list(incarnations)}))
    return incarnations


def _exchange(space: str, me: int, count: int, mine: dict, timeout_s: float, tag: str = ""):
    """Every process's facts, the job tag (`tag`, or process 0's choice) and the secret,
    through the key-value store under `space`."""
    from ._kv import KeyValueStore

    kv = KeyValueStore()
    if me == 0:
        job_tag = tag or _settings.current().job_id or secrets.token_hex(6)
        kv.set(f"{space}/job/secret", secrets.token_hex(16))
        kv.set(f"{space}/job", job_tag)
    else:
        job_tag = kv.get(f"{space}/job", timeout_s)
    secret = kv.get(f"{space}/job/secret", timeout_s)
    mine = dict(mine, job=job_tag)
    kv.set(f"{space}/{job_tag}/process/{me}", json.dumps(mine))
    infos = [json.loads(kv.get(f"{space}/{job_tag}/process/{p}", timeout_s)) for p in range(count)]
    _check_agreement(infos, me)
    return infos, job_tag, secret


def _check_agreement(infos: list, me: int) -> None:
    """Every process raises on the first setting where some process differs from process 0."""
    first = infos[0]["settings"]
    for p, info in enumerate(infos[1:], start=1):
        for name, value in first.items():
            if info["settings"].get(name) != value:
                raise ValueError(
                    f"jaccl: process {p} has {name}={info['settings'].get(name)!r} but process 0 "
                    f"has {value!r} (seen by process {me}): {name} must be the same on every "
                    "process of a job")


def _listen_address() -> str:
    """JACCL_IFNAME's address, or the local address that reaches JAX's coordinator."""
    ifname = _settings.current().ifname
    if ifname:
        return engine.interface_address(ifname)
    coordinator = (getattr(_compat.distributed_state(), "coordinator_address", None)
                   or _settings.launch().coordinator or "127.0.0.1:0")
    return engine.address_towards(coordinator.rsplit(":", 1)[0])


def _attach(prefix: str, me: int, hosts: tuple, timeout_s: float) -> None:
    """Maps the host peers' segments, then unlinks ours once every peer has mapped it (the
    key-value store's keys under `prefix`)."""
    from ._kv import KeyValueStore

    kv = KeyValueStore()
    peers = [p for p, h in enumerate(hosts) if h == hosts[me] and p != me]
    try:
        kv.set(f"{prefix}/created/{me}", "1")
        for p in peers:
            kv.get(f"{prefix}/created/{p}", timeout_s)
        engine.attach_peers()
        kv.set(f"{prefix}/attached/{me}", "1")
        for p in peers:
            kv.get(f"{prefix}/attached/{p}", timeout_s)
    finally:
        engine.unlink_own_segment()


def attach_on_first_use() -> None:
    """What the mpiabi library runs (on the XLA thread of a process's first collective) when the
    program never started jaccl: init(), which attaches the mpiabi library; a failure is handed back
    to the mpiabi library as that collective's error."""
    try:
        init()
        engine.log_info("XLA's first collective started jaccl's engine (the program had not "
                        "called jaccl.init())")
    except BaseException as e:  # noqa: BLE001 - it becomes the collective's error
        _xla_collectives.refuse(f"{type(e).__name__}: {e}")


def renew_with_those_back() -> None:
    """What the mpiabi library runs (on an XLA thread, inside the program) when XLA runs a
    collective on a communicator whose devices the world lacks, or splits MPI_COMM_WORLD in a job
    that recovers: where processes came back, the world over the processes JAX's last
    multihost_utils.live_devices block reported, those that came back among them, as
    init(devices) builds it when a jaccl op is lowered over their mesh (the program asking is
    the only one in flight; this process's other devices wait in the mpiabi library). A process of
    the world on this host that died since the world's last call revokes the world first (and the
    survivors' is built where JAX already reported the loss): XLA keeps a communicator whose
    split failed for the process's life, and a split that met the dead process would fail every
    later step over its devices. When it cannot, the collective fails saying why."""
    try:
        with _lock:
            if _no_next_world is not None:
                raise RuntimeError(_no_next_world)
            if _world is not None and _recovery.recoverable() and not engine.aborted():
                dead = engine.dead_peer()
                if dead:
                    engine.raise_abort(dead)
                _renew(tuple(sorted(_recovery.live_incarnations())), in_program=True)
    except BaseException as e:  # noqa: BLE001 - the collective XLA runs then fails with this
        _xla_collectives.renew_failed(f"jaccl: no world with the processes that came back for "
                                      f"XLA's collectives: {type(e).__name__}: {e}")


def renew_after_loss() -> None:
    """What the mpiabi library runs (on an XLA thread) before XLA makes a communicator: after a lost
    process (the world aborted, JAX's recoverability on), the world over the processes JAX's
    last multihost_utils.live_devices block reported, as init(devices) builds it when a jaccl
    op is lowered over their mesh; a program of XLA's collectives alone gets it here. Nothing
    when no world failed; when it cannot, the communicator XLA makes fails saying why."""
    try:
        with _lock:
            if _no_next_world is not None:  # an earlier renewal failed: say so again
                raise RuntimeError(_no_next_world)
            if _world is not None and _recovery.recoverable() and engine.aborted():
                _renew(tuple(sorted(_recovery.live_incarnations())))
    except BaseException as e:  # noqa: BLE001 - the communicator XLA makes then fails with this
        _xla_collectives.renew_failed(f"jaccl: no new world for XLA's collectives after a lost "
                                      f"process: {type(e).__name__}: {e}")
