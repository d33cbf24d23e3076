"""A user's first multi-host test: a sharded sum over 8 devices of 4 processes on 2 emulated hosts."""

import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P


@pytest.mark.jax_processes(4, devices_per_process=2, hosts=2, timeout=120)
def test_my_sharded_step(jax_job):          # runs in each of the 4 processes
    mesh = jax.make_mesh((8,), ("data",))   # 8 devices over 2 emulated hosts
    x = jax.make_array_from_callback((8,), NamedSharding(mesh, P("data")),
                                     lambda index: np.arange(8.0, dtype=np.float32)[index])
    total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(x)
    assert float(total) == 28.0
    assert jax_job.process_count == 4
    out = Path(os.environ["PLUGIN_TEST_OUT"])
    (out / f"rank{jax_job.process_index}").write_text(
        f"{jax_job.host_index} {jax.process_count()} {jax.local_device_count()} {jax.device_count()}")
