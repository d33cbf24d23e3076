"""Process set-up for scripts started by jaccl-run (or by SLURM / Open MPI).

Contract: initialize() must run before any other JAX call in the process. Under jaccl-run it
takes JACCL_COORDINATOR, JACCL_NUM_PROCESSES, JACCL_PROCESS_ID and JACCL_LOCAL_DEVICES
(_settings.launch(), read when it runs) and
calls jax.distributed.initialize() with them (and sets jax_num_cpu_devices); under SLURM or
Open MPI it lets jax.distributed.initialize() find its settings by itself; alone, it only sets
the local device count (and on jaxlib < 0.12.1 sets NPROC so that XLA's CPU pool holds that
many devices: _cpu_pool). Where jaccl-run (by default, or `jaccl-info --xla-collectives-env`
under SLURM / Open MPI) put jaccl's mpiabi library in place (_xla_collectives), it also runs
jaccl.init(), so the collectives XLA emits run on jaccl from the first computation on (also
with several CPU devices per process, where the launcher was asked to); where it could not
(jax imported before the launcher's environment took effect, or a device count other than the
launcher planned: those stay on gloo), it says why (a warning). With JACCL_IFNAME set,
jax.lax's own CPU collectives (gloo) use that interface too: they otherwise take the address
the host name resolves to, 127.0.0.1 inside a network namespace. In a job of several processes
an uncaught exception then ends the job at once, naming the process and the line (_uncaught).
Returns (process_index, process_count).
"""

from __future__ import annotations

import os
import warnings

import jax

from . import _cpu_pool, _settings, _xla_collectives, _uncaught

_CLUSTER_MARKERS = ("SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE")


def _gloo_on_interface(ifname: str) -> None:
    import functools

    from . import _compat

    _jax = _compat.jaxlib_extension()  # private: left alone where this JAX lacks it
    make = getattr(_jax, "make_gloo_tcp_collectives", None)
    if make is not None and not isinstance(make, functools.partial):
        _jax.make_gloo_tcp_collectives = functools.partial(make, interface=ifname)


def initialize(local_devices: int | None = None) -> tuple[int, int]:
    job = _settings.launch()
    if job.ifname:
        _gloo_on_interface(job.ifname)
    if local_devices is None and job.local_devices:
        local_devices = job.local_devices
    if local_devices:
        jax.config.update("jax_num_cpu_devices", local_devices)
        _cpu_pool.make_room(local_devices)  # jaxlib < 0.12.1 deadlocks in too small a pool
    unplanned = _xla_collectives.unplanned_devices(local_devices)
    if unplanned:  # the launcher chose jaccl for another device count: JAX's own instead
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if job.coordinator:
        _xla_collectives.expect(job.process_id, job.num_processes)
        jax.distributed.initialize(
            coordinator_address=job.coordinator,
            num_processes=job.num_processes,
            process_id=job.process_id,
            initialization_timeout=int(job.init_timeout_s),
            heartbeat_timeout_seconds=int(job.heartbeat_timeout_s),
            shutdown_timeout_seconds=int(job.shutdown_timeout_s),
        )
    elif any(k in os.environ for k in _CLUSTER_MARKERS):
        jax.distributed.initialize()
    if jax.process_count() > 1:
        _uncaught.install()  # an exception that ends this process ends the job, naming it
    why_not = unplanned or _xla_collectives.problem()
    if why_not:
        warnings.warn(f"jaccl: XLA's own collectives stay on JAX's gloo: {why_not}", stacklevel=2)
    elif _xla_collectives.active() and jax.process_count() > 1:
        from . import _bootstrap, _recovery

        # A process started again joins the world the others build with it later: at the
        # first program lowered over a mesh of its devices, or XLA's first collective.
        if not _recovery.started_again():
            _bootstrap.init()  # hands jaccl's engine to the mpiabi library before any computation
    return jax.process_index(), jax.process_count()
