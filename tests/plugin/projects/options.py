"""The marker's options: env=, network= (loopback, namespaces), ranks=, xla_collectives=."""

import os

import pytest


@pytest.mark.jax_processes(2, hosts=2, network="loopback", env={"MY_SETTING": "on"}, timeout=60)
def test_env_and_loopback_hosts(jax_job):
    import jax_jaccl as jaccl
    from jax_jaccl import _xla_collectives
    assert os.environ["MY_SETTING"] == "on"
    assert os.environ["JACCL_HOST_ID"].endswith(f"-emulated-{jax_job.process_index}")
    assert jaccl.init().host_count == 2
    assert _xla_collectives.active(), "XLA's collectives on jaccl, as under jaccl-run"


@pytest.mark.jax_processes(2, hosts=2, network="namespaces", link_rate="1gbit", timeout=60)
def test_namespaces_or_skip(jax_job):
    import jax_jaccl as jaccl
    assert os.environ["JACCL_IFNAME"] and jaccl.init().host_count == 2


@pytest.mark.jax_processes(4, hosts=2, network="loopback", ranks="round-robin", xla_collectives="gloo",
                           timeout=60)
def test_round_robin_ranks(jax_job):
    import jax_jaccl as jaccl
    from jax_jaccl import _xla_collectives
    assert not _xla_collectives.active()
    assert jax_job.host_index == jax_job.process_index % 2
    assert os.environ["JACCL_HOST_ID"].endswith(f"-emulated-{jax_job.process_index % 2}")
    assert jaccl.init().host_count == 2
