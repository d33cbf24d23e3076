"""Sets up the GPU peer path at bootstrap: a workspace per local GPU, its CUDA IPC handle
published through JAX's key-value store, every workspace of the host opened, and the device
pairs that can read each other both ways agreed by all processes of the host.

Contract:
- setup() runs once per process from bootstrap._start(), after the engine's world exists;
  only processes that announced GPUs (`gpus` in their bootstrap facts) take part, and each
  waits only for the processes of its host that did.
- Nothing here fails the job: a GPU whose workspace cannot be created or opened is left out
  of the peer path (its groups take the staged path) and the reason is logged; the pair list
  every process of the host applies is the same, so every rank of a group chooses the same
  path.
- JACCL_CUDA_PATH=staged skips all of it; JACCL_CUDA_BUFFER_MB sizes each workspace's
  staging area (default 64, at least 1).
"""

from __future__ import annotations

import json

import jax

from . import _settings
from ._ext import cuda_engine, engine


def local_gpus() -> list:
    if cuda_engine is None or _settings.current().cuda_path == "staged":
        return []
    return [d for d in jax.local_devices() if d.platform == "gpu"]


def setup(me: int, infos: list, hosts: tuple, prefix: str, timeout_s: float) -> None:
    gpus = local_gpus()
    if not gpus:
        return
    buffer_mb = _settings.current().cuda_buffer_mb
    world_devices = max(int(d.id) for d in jax.devices()) + 1
    mine = []
    try:
        for d in gpus:
            handle, bus = cuda_engine.create_workspace(
                ordinal=int(d.local_hardware_id), device=int(d.id), process=me,
                world_devices=world_devices, world_processes=len(infos),
                data_bytes=buffer_mb << 20, timeout_s=timeout_s)
            mine.append({"device": int(d.id), "handle": handle.hex(), "bus": bus,
                         "bytes": buffer_mb << 20})
    except RuntimeError as e:
        engine.log_warning(f"GPU peer path unavailable on process {me}: {e}")
        mine = []
    partners = [p for p, info in enumerate(infos)
                if hosts[p] == hosts[me] and info.get("gpus", 0) > 0]
    kv = None
    if len(infos) > 1:
        from ._kv import KeyValueStore

        kv = KeyValueStore()
    entries = _share(kv, f"{prefix}/cuda/workspaces", me, partners, mine, timeout_s)
    for p, workspaces in entries.items():
        for w in workspaces:
            handle = b"" if p == me else bytes.fromhex(w["handle"])
            ok, why = cuda_engine.open_peer(device=w["device"], process=p, pid=int(infos[p]["pid"]),
                                            handle=handle, bus_id=w["bus"], data_bytes=w["bytes"])
            if not ok:
                engine.log_warning(f"GPU device {w['device']} of process {p} is not readable from "
                                   f"process {me}: {why}; groups with it are staged through host "
                                   "memory")
    readable = [list(pair) for pair in cuda_engine.readable_pairs()]
    everyone = _share(kv, f"{prefix}/cuda/readable", me, partners, readable, timeout_s)
    cuda_engine.set_reachable([tuple(pair) for pairs in everyone.values() for pair in pairs])


def _share(kv, key: str, me: int, partners: list, value, timeout_s: float) -> dict:
    """Publishes `value` under key/me and returns {p: value of p} for every partner."""
    if kv is None:
        return {me: value}
    kv.set(f"{key}/{me}", json.dumps(value))
    return {p: json.loads(kv.get(f"{key}/{p}", timeout_s)) for p in partners}
