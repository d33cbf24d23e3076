"""jaccl's collectives against jax.lax across processes and emulated hosts, written as plain
test functions that the pytest plugin runs as jobs (what tests/multiprocess/workers/ do with
scripts printing `OK` lines, here with assertions): every algorithm forced, odd sizes and
several dtypes, bitwise; hosts are network namespaces where the run is root."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jax_jaccl as jaccl


def per_device(fn, mesh):
    body = lambda v: fn(v)[None]  # noqa: E731
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))


def global_rows(mesh, rows_per_device, dtype, seed=0):
    n = mesh.devices.size
    data = np.random.default_rng(seed).integers(-50, 50, size=(n * rows_per_device,)).astype(dtype)
    return jax.make_array_from_callback(data.shape, NamedSharding(mesh, P("x")), lambda i: data[i])


def assert_same(got, want, what):
    for g, w in zip(got.addressable_shards, want.addressable_shards):
        a, b = np.asarray(g.data), np.asarray(w.data)
        if a.dtype == jnp.bfloat16:
            a, b = a.astype(np.float32), b.astype(np.float32)
        np.testing.assert_array_equal(a, b, err_msg=f"{what} on device {g.device.id}")


@pytest.mark.jax_processes(4, devices_per_process=2, hosts=2, timeout=240)
def test_every_algorithm_matches_lax_across_hosts(jax_job):
    assert jax_job.process_count == 4 and jax.device_count() == 8
    assert jaccl.init().host_count == 2
    mesh = jax.make_mesh((8,), ("x",))
    for size in (5, 30_011):
        x = global_rows(mesh, size * 8, np.int32, seed=size)
        for algorithm in ("naive", "mesh", "ring", "ring_oneway", "hierarchical"):
            got = per_device(lambda v: jaccl.all_reduce(v, "x", algorithm=algorithm), mesh)(x)
            assert_same(got, per_device(lambda v: jax.lax.psum(v, "x"), mesh)(x), f"all_reduce/{algorithm}/{size}")
            if algorithm == "naive":
                continue
            got = per_device(lambda v: jaccl.reduce_scatter(v, "x", tiled=True, algorithm=algorithm), mesh)(x)
            want = per_device(lambda v: jax.lax.psum_scatter(v, "x", tiled=True), mesh)(x)
            assert_same(got, want, f"reduce_scatter/{algorithm}/{size}")
            if algorithm == "hierarchical":
                continue
            got = per_device(lambda v: jaccl.all_gather(v, "x", tiled=True, algorithm=algorithm), mesh)(x)
            want = per_device(lambda v: jax.lax.all_gather(v, "x", tiled=True), mesh)(x)
            assert_same(got, want, f"all_gather/{algorithm}/{size}")


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.int8, np.uint32])
@pytest.mark.jax_processes(2, devices_per_process=2, hosts=2, timeout=240)
def test_dtypes_match_lax(jax_job, dtype):
    mesh = jax.make_mesh((4,), ("x",))
    x = global_rows(mesh, 4 * 9, dtype)
    assert_same(per_device(lambda v: jaccl.all_reduce(v, "x"), mesh)(x),
                per_device(lambda v: jax.lax.psum(v, "x"), mesh)(x), "all_reduce")
    assert_same(per_device(lambda v: jaccl.all_to_all(v, "x", 0, 0, tiled=True), mesh)(x),
                per_device(lambda v: jax.lax.all_to_all(v, "x", 0, 0, tiled=True), mesh)(x), "all_to_all")
