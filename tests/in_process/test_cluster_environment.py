"""jaccl-run's cluster environment for jax.distributed.initialize() with no arguments
(jax_jaccl/_cluster.py): it reads jaccl-run's three variables, comes before JAX's own
environments (a jaccl-run job inside a SLURM allocation is jaccl-run's), and is absent outside
jaccl-run. The start-up hook itself runs in the jobs of tests/processes/test_xla_collectives.py."""

from __future__ import annotations

from jax._src import clusters

from jax_jaccl import _cluster


def test_the_environment_finds_jaccl_runs_job_first(monkeypatch):
    monkeypatch.setenv("JACCL_COORDINATOR", "10.0.0.1:4321")
    monkeypatch.setenv("JACCL_NUM_PROCESSES", "3")
    monkeypatch.setenv("JACCL_PROCESS_ID", "2")
    monkeypatch.setenv("SLURM_JOB_ID", "77")  # SLURM's environment would claim the job too
    kind = _cluster.define(clusters)
    try:
        assert clusters.ClusterEnv._cluster_types[0] is kind
        found = clusters.ClusterEnv.auto_detect_unset_distributed_params(
            None, None, None, None, None, 10)
        assert found == ("10.0.0.1:4321", 3, 2, None)
        monkeypatch.delenv("JACCL_COORDINATOR")
        assert not kind.is_env_present()
    finally:
        clusters.ClusterEnv._cluster_types.remove(kind)


def test_install_does_nothing_outside_jaccl_run(monkeypatch):
    import sys

    for name in ("JACCL_COORDINATOR", "JACCL_NUM_PROCESSES", "JACCL_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)
    before = list(sys.meta_path), list(clusters.ClusterEnv._cluster_types)
    _cluster.install()
    assert (list(sys.meta_path), list(clusters.ClusterEnv._cluster_types)) == before
