"""`jax.distributed.initialize()` with no arguments under jaccl-run, as under SLURM or Open MPI.

JAX finds a job's coordinator, process count and process id through its cluster environments
(jax._src.clusters: subclasses of ClusterEnv join JAX's list when they are defined). jaccl-run's
processes get theirs from JACCL_COORDINATOR, JACCL_NUM_PROCESSES and JACCL_PROCESS_ID; this
module adds an environment that reads them, first in the list (a jaccl-run job started inside
a SLURM allocation is jaccl-run's, not SLURM's).

When jaccl-run runs JAX's coordination service itself (JACCL_COORDINATION_SERVICE=launcher:
its --keep-going on one machine, so that the job survives a lost process 0), process 0 must
not start its own: once jax._src.distributed is loaded, the jaxlib module it calls gets a
stand-in for the function that would (skip_own_service), and process 0 connects to jaccl-run's
service like every other process.

Under jaccl-run's service each process also notes, once jax.distributed.initialize() has
connected it (every process registered: JAX's registration is a barrier), a line
"jaccl-run-note: connected <restart>" on its stderr (note_connected), which jaccl-run reads
instead of printing it (over ssh and prefixes too): jaccl-run tells the service at once that a
process which connected died (launch._report_lost); one that died before connecting is left to
the service (telling it then would stand in for it in that barrier).

Where XLA's collectives run on jaccl, each program is checked as it compiles for collectives
past MPI's 32-bit counts (_mpi_counts.py), and its groups of devices are kept for the checks
after a lost process (_xla_groups.py), once jax has loaded (watch_compiles).

Contract: install() runs at interpreter start-up, from jax_jaccl_cluster.pth in site-packages,
only in processes that jaccl-run (or the pytest plugin) started (JACCL_COORDINATOR is set). It
imports nothing of JAX's: it waits for JAX to import jax._src.clusters (and
jax._src.distributed) and then defines the environment. Programs that pass the three values
themselves, or call jax_jaccl.distributed.initialize(), are unaffected by the environment; the
stand-in serves them too.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

from . import _settings

_CLUSTERS = "jax._src.clusters"
_DISTRIBUTED = "jax._src.distributed"


def present() -> bool:
    try:
        job = _settings.launch()
    except ValueError:  # a bad value: jax_jaccl.distributed.initialize() says which
        return False
    return bool(job.coordinator) and job.num_processes > 0


def define(clusters) -> type:
    """The jaccl-run environment, defined on the loaded jax._src.clusters and put first."""

    class JacclRunCluster(clusters.ClusterEnv):
        name = "jaccl-run"

        @classmethod
        def is_env_present(cls) -> bool:
            return present()

        @classmethod
        def get_coordinator_address(cls, *args, **kwargs) -> str:
            return _settings.launch().coordinator

        @classmethod
        def get_process_count(cls) -> int:
            return _settings.launch().num_processes

        @classmethod
        def get_process_id(cls) -> int:
            return _settings.launch().process_id

        @classmethod
        def get_local_process_id(cls) -> int | None:
            return None  # every CPU device of the process stays visible

    kinds = clusters.ClusterEnv._cluster_types
    kinds.remove(JacclRunCluster)
    kinds.insert(0, JacclRunCluster)
    return JacclRunCluster


class _ServiceElsewhere:
    """What process 0 keeps as its coordination service when jaccl-run runs it: nothing to
    stop (jax.distributed.shutdown() calls shutdown())."""

    def shutdown(self) -> None:
        pass


class _WithoutOwnService:
    """jaxlib's module as jax._src.distributed sees it in process 0 of a job whose coordination
    service jaccl-run runs: jaxlib's functions, but the one that would start a service."""

    def __init__(self, jaxlib):
        self._jaxlib = jaxlib

    def __getattr__(self, name):
        return getattr(self._jaxlib, name)

    def get_distributed_runtime_service(self, *args, **kwargs):
        return _ServiceElsewhere()


def skip_own_service(distributed) -> None:
    distributed._jax = _WithoutOwnService(distributed._jax)


def under_launcher_service(distributed) -> None:
    """jax._src.distributed in a process of a job whose coordination service jaccl-run runs."""
    if _settings.launch().process_id == 0:
        skip_own_service(distributed)
    note_connected(distributed)


# The start of the line a process writes on its stderr once it connected (its restart follows).
CONNECTED = b"jaccl-run-note: connected "


def note_connected(distributed) -> None:
    """Makes jax.distributed.initialize() write CONNECTED and this start's restart number on
    stderr once it returns (this process connected to the service)."""
    state = distributed.global_state
    initialize = state.initialize

    def initialize_and_note(*args, **kwargs):
        initialize(*args, **kwargs)
        try:
            os.write(2, CONNECTED + b"%d\n" % _settings.launch().restart)
        except OSError:  # jaccl-run gone: no one to tell, and the program goes on
            pass

    state.initialize = initialize_and_note


class _AfterLoad(importlib.abc.MetaPathFinder):
    """Finds module `name` as the other finders do, and calls `then(module)` once it has run."""

    def __init__(self, name: str, then) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            self.then(module)

        spec.loader.exec_module = exec_module
        return spec


def _after_load(name: str, then) -> None:
    if name in sys.modules:  # jax came first (imported by a sitecustomize, say)
        then(sys.modules[name])
    elif not any(isinstance(f, _AfterLoad) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterLoad(name, then))


def install() -> None:
    if not present():
        return
    _after_load(_CLUSTERS, define)
    job = _settings.launch()
    if job.coordination_service == "launcher":
        _after_load(_DISTRIBUTED, under_launcher_service)
    if job.xla_collectives == "jaccl":
        _after_load("jax", watch_compiles)


def watch_compiles(jax) -> None:
    """Once jax has loaded: each program XLA compiles is checked for counts past MPI's int
    (_mpi_counts.py) and its groups kept (_xla_groups.py), as a program that never calls jaccl
    runs its collectives on the mpiabi library."""
    del jax
    from . import _mpi_counts, _xla_groups

    _mpi_counts.install()
    _xla_groups.install()
