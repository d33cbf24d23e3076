"""A user's check of jaccl's all_reduce against jax.lax.psum, three ways: by default (jax.lax
on jaccl's engine too: the plugin warns), on JAX's own collectives, and on jaccl when asked."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jax_jaccl as jaccl


def both_sums():
    mesh = jax.make_mesh((2,), ("x",))
    x = jax.make_array_from_callback((8,), NamedSharding(mesh, P("x")),
                                     lambda i: np.arange(8.0, dtype=np.float32)[i])
    run = lambda f: jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(x)  # noqa: E731
    ours = run(lambda v: jaccl.all_reduce(v, "x"))
    theirs = run(lambda v: jax.lax.psum(v, "x"))
    np.testing.assert_array_equal(np.asarray(ours.addressable_shards[0].data),
                                  np.asarray(theirs.addressable_shards[0].data))


@pytest.mark.jax_processes(2, timeout=120)
def test_by_default(jax_job):
    assert jax_job.xla_collectives == "jaccl"
    both_sums()


@pytest.mark.jax_processes(2, timeout=120, xla_collectives="gloo")
def test_on_gloo(jax_job):
    assert jax_job.xla_collectives == "gloo"
    both_sums()


@pytest.mark.jax_processes(2, timeout=120, xla_collectives="jaccl")
def test_on_jaccl_when_asked(jax_job):
    assert jax_job.xla_collectives == "jaccl"
    both_sums()
