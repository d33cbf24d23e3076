"""Process set-up for scripts started by jaccl-run (or by SLURM / Open MPI).

Contract: initialize() must run before any other JAX call in the process. Under jaccl-run it
reads JACCL_COORDINATOR, JACCL_NUM_PROCESSES, JACCL_PROCESS_ID and JACCL_LOCAL_DEVICES and
calls jax.distributed.initialize() with them (and sets jax_num_cpu_devices); under SLURM or
Open MPI it lets jax.distributed.initialize() find its settings by itself; alone, it only sets
the local device count. With JACCL_IFNAME set, jax.lax's own CPU collectives (gloo) use that
interface too: they otherwise take the address the host name resolves to, 127.0.0.1 inside a
network namespace. Returns (process_index, process_count).
"""

from __future__ import annotations

import os

import jax

_CLUSTER_MARKERS = ("SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE")


def _gloo_on_interface(ifname: str) -> None:
    import functools

    from jax._src.lib import _jax  # private: left alone where this JAX lacks it

    make = getattr(_jax, "make_gloo_tcp_collectives", None)
    if make is not None and not isinstance(make, functools.partial):
        _jax.make_gloo_tcp_collectives = functools.partial(make, interface=ifname)


def initialize(local_devices: int | None = None) -> tuple[int, int]:
    if os.environ.get("JACCL_IFNAME"):
        _gloo_on_interface(os.environ["JACCL_IFNAME"])
    if local_devices is None and os.environ.get("JACCL_LOCAL_DEVICES"):
        local_devices = int(os.environ["JACCL_LOCAL_DEVICES"])
    if local_devices:
        jax.config.update("jax_num_cpu_devices", local_devices)
    coordinator = os.environ.get("JACCL_COORDINATOR")
    if coordinator:
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=int(os.environ["JACCL_NUM_PROCESSES"]),
            process_id=int(os.environ["JACCL_PROCESS_ID"]),
            initialization_timeout=int(float(os.environ.get("JACCL_INIT_TIMEOUT", "120"))),
            heartbeat_timeout_seconds=int(float(os.environ.get("JACCL_HEARTBEAT_TIMEOUT", "100"))),
            shutdown_timeout_seconds=int(float(os.environ.get("JACCL_SHUTDOWN_TIMEOUT", "30"))),
        )
    elif any(k in os.environ for k in _CLUSTER_MARKERS):
        jax.distributed.initialize()
    return jax.process_index(), jax.process_count()
