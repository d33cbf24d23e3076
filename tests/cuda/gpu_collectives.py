"""Collectives on GPUs (the staged CUDA path), runnable with pytest or as a plain script (the
GPU machine may have no pytest): `python tests/cuda/gpu_collectives.py [--worker]`.

Checks every op against numpy on exact data, over dtypes and odd sizes, in the process's
GPUs (a world of 1 on a one-GPU machine) and, with --worker under jaccl-run, across processes
sharing the GPU. Skips with the reason when JAX has no GPU."""

from __future__ import annotations

import sys

import numpy as np


def gpu_reason():
    try:
        import jax

        return None if jax.devices("gpu") else "no GPU"
    except Exception as e:  # noqa: BLE001
        return f"JAX has no GPU backend here ({type(e).__name__})"


def check_all(verbose=True):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jax_jaccl as jaccl

    devices = jax.devices("gpu")
    n = len(devices)
    mesh = jax.sharding.Mesh(np.array(devices), ("x",))
    sharding = NamedSharding(mesh, P("x"))
    checked = 0
    for dtype in (np.float32, jnp.bfloat16, np.float16, np.int32, np.int8, np.float64):
        if dtype == np.float64 and not jax.config.jax_enable_x64:
            continue
        for size in (1, 7, 1000, 65_537, 1 << 20):
            rng = np.random.default_rng(size)
            local = (rng.integers(-8, 8, size=(n, size * n)) / (1 if np.dtype(dtype).kind == "i" else 4))
            local = local.astype(dtype)
            x = jax.make_array_from_callback(local.reshape(-1).shape, sharding,
                                             lambda i: local.reshape(-1)[i])

            def run(fn):
                body = lambda v: fn(v)[None]  # noqa: E731
                f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
                return np.asarray(jax.device_get(f(x)), np.float64)

            total = local.astype(np.float64).sum(0)
            want = {
                "all_reduce": np.broadcast_to(total, (n,) + total.shape),
                "reduce_scatter": total.reshape(n, -1),
                "all_gather": np.broadcast_to(local.astype(np.float64).reshape(-1), (n, local.size)),
            }
            got = {
                "all_reduce": run(lambda v: jaccl.all_reduce(v, "x")),
                "reduce_scatter": run(lambda v: jaccl.reduce_scatter(v, "x", tiled=True)),
                "all_gather": run(lambda v: jaccl.all_gather(v, "x", tiled=True)),
            }
            for name in want:
                np.testing.assert_array_equal(got[name], want[name],
                                              err_msg=f"{name} {np.dtype(dtype).name} {size}")
                checked += 1
    if verbose:
        print(f"OK {checked} GPU checks on {n} device(s) of process {jax.process_index()}", flush=True)
    return checked


def test_collectives_on_gpu():
    import pytest

    reason = gpu_reason()
    if reason:
        pytest.skip(reason)
    assert check_all() > 0


if __name__ == "__main__":
    if "--worker" in sys.argv:
        import jax_jaccl.distributed

        jax_jaccl.distributed.initialize()
    reason = gpu_reason()
    if reason:
        print(f"SKIP: {reason}")
        sys.exit(0)
    check_all()
