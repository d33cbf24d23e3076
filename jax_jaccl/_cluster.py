"""`jax.distributed.initialize()` with no arguments under jaccl-run, as under SLURM or Open MPI.

JAX finds a job's coordinator, process count and process id through its cluster environments
(jax._src.clusters: subclasses of ClusterEnv join JAX's list when they are defined). jaccl-run's
processes get theirs from JACCL_COORDINATOR, JACCL_NUM_PROCESSES and JACCL_PROCESS_ID; this
module adds an environment that reads them, first in the list (a jaccl-run job started inside
a SLURM allocation is jaccl-run's, not SLURM's).

Contract: install() runs at interpreter start-up, from jax_jaccl_cluster.pth in site-packages,
only in processes that jaccl-run (or the pytest plugin) started (JACCL_COORDINATOR is set). It
imports nothing of JAX's: it waits for JAX to import jax._src.clusters and then defines the
environment. Programs that pass the three values themselves, or call
jax_jaccl.distributed.initialize(), are unaffected.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

from . import _settings

_CLUSTERS = "jax._src.clusters"


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


class _WhenClustersLoad(importlib.abc.MetaPathFinder):
    """Finds jax._src.clusters as the other finders do, and defines the environment once the
    module has run."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _CLUSTERS:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            define(module)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    if not present():
        return
    if _CLUSTERS in sys.modules:  # jax came first (imported by a sitecustomize, say)
        define(sys.modules[_CLUSTERS])
    elif not any(isinstance(f, _WhenClustersLoad) for f in sys.meta_path):
        sys.meta_path.insert(0, _WhenClustersLoad())
