"""Four small jobs (pytest-xdist spreads them over its workers)."""

import pytest


@pytest.mark.parametrize("case", range(4))
@pytest.mark.jax_processes(2, timeout=120)
def test_job(jax_job, case):
    import jax
    import jax.numpy as jnp
    assert jax_job.process_count == 2
    assert jax.device_count() == 2
    assert float(jax.jit(lambda x: x.sum())(jnp.ones(3))) == 3.0
