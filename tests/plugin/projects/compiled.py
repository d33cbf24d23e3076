"""The same program over both processes' devices, compiled in two jobs, then in a third whose
XLA collectives run on gloo; each rank writes how many programs it loaded from JAX's persistent
cache and which cache folder it was given."""

import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P


@pytest.mark.jax_processes(2, timeout=120)
@pytest.mark.parametrize("job", [1, 2])
def test_compile(jax_job, job):
    compile_and_record(jax_job, f"job{job}")


@pytest.mark.jax_processes(2, timeout=120, xla_collectives="gloo")
def test_compile_on_gloo(jax_job):
    compile_and_record(jax_job, "gloo")


def compile_and_record(jax_job, name):
    hits = []
    jax.monitoring.register_event_listener(
        lambda name, **_: hits.append(name) if name == "/jax/compilation_cache/cache_hits" else None)
    mesh = jax.make_mesh((2,), ("d",))
    x = jax.make_array_from_callback((64,), NamedSharding(mesh, P("d")),
                                     lambda index: np.arange(64.0, dtype=np.float32)[index])
    step = jax.jit(lambda x: (jnp.sin(x) * 3 + 1).sum(), out_shardings=NamedSharding(mesh, P()))
    assert abs(float(step(x)) - float((np.sin(np.arange(64.0)) * 3 + 1).sum())) < 1e-3
    seen = f"{len(hits)} {os.environ.get('JAX_COMPILATION_CACHE_DIR', '-')}"
    Path(os.environ["PLUGIN_TEST_OUT"], f"{name}-rank{jax_job.process_index}").write_text(seen)
