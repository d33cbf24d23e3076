"""The CPU handlers' asynchronous way of running a call (handlers/cpu/async_call.h): on the
device's own thread while XLA computes on. The suite's other files run with the default
(JACCL_ASYNC=1 from 64 KiB up), where their mostly small calls block XLA's thread as with
JACCL_ASYNC=0; here the same checks run with every call on the device threads (from 0 KiB
up): the algorithms on odd sizes and a 2-D mesh, the ragged all-to-all model, MoE
dispatch/combine against the reference, and many collectives of one program in order. The
process tests' faults ran green with JACCL_ASYNC_MIN_KB=0 as well (docs/tests.md)."""

from __future__ import annotations

import numpy as np
import pytest

from jax_jaccl import _settings

from util import load_test_file

test_moe = load_test_file("in_process/test_moe")
_algorithms = load_test_file("in_process/test_algorithms")
test_all_reduce_algorithms = _algorithms.test_all_reduce_algorithms
test_groups_of_a_2d_mesh = _algorithms.test_groups_of_a_2d_mesh
test_many_collectives_in_one_program_keep_their_order = \
    _algorithms.test_many_collectives_in_one_program_keep_their_order
test_reduce_scatter_and_all_gather_algorithms = _algorithms.test_reduce_scatter_and_all_gather_algorithms
test_matches_the_model = load_test_file("in_process/test_ragged_all_to_all").test_matches_the_model


@pytest.mark.parametrize("case", test_moe.CASES)
def test_moe_dispatch_and_combine_in_float32(case):
    test_moe.test_dispatch_and_combine_match_reference(case, np.float32)


@pytest.fixture(autouse=True)
def every_call_on_the_device_threads():
    with _settings.override(async_calls=True, async_min_kb=0):
        yield


def test_a_call_under_compute_on_a_gpu_stream_runs_on_cpus_unchanged():
    """Users put collectives on a GPU stream of their own with compute_on("gpu_stream:N")
    (XLA:GPU would run the call beside the compute stream; jax 0.11.2's does not compile it:
    tests/cuda); the same program on CPUs lowers and gives the same result (XLA:CPU ignores
    the stream): both against numpy."""
    import jax
    from jax.sharding import PartitionSpec as P

    import jax_jaccl as jaccl
    from gpu_streams import on_gpu_stream
    from util import N, mesh1d, put

    mesh = mesh1d()
    reduce_on_stream = on_gpu_stream(jax.jit(lambda v: jaccl.all_reduce(v, "x")))
    x = put(np.arange(N * 1000, dtype=np.float32), mesh)
    run = lambda body: jax.jit(jax.shard_map(  # noqa: E731
        body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(x)
    want = 2 * np.tile(np.arange(N * 1000, dtype=np.float32).reshape(N, 1000).sum(0), N)
    np.testing.assert_array_equal(run(lambda v: reduce_on_stream(v) * 2), want)
    np.testing.assert_array_equal(run(lambda v: jaccl.all_reduce(v, "x") * 2), want)


def test_calls_run_where_the_settings_say():
    """The engine counts the calls its handlers ran on XLA's thread and those handed to a
    device's call thread: with every call asynchronous (this file's setting) each of the N
    devices hands its call over; with JACCL_ASYNC=0 none does; by default a 4 KiB call runs at
    once and a 1 MiB one is handed over. (Without this, the suite would pass with the
    asynchronous path gone.)"""
    import jax
    from jax.sharding import PartitionSpec as P

    import jax_jaccl as jaccl
    from jax_jaccl._ext import engine
    from util import N, mesh1d, put

    def counts(elements):
        x = put(np.arange(N * elements, dtype=np.float32), mesh1d())
        f = jax.jit(jax.shard_map(lambda v: jaccl.all_reduce(v, "x"), mesh=mesh1d(),
                                  in_specs=P("x"), out_specs=P("x")))
        compiled = f.lower(x).compile()
        before = engine.call_counts()
        compiled(x).block_until_ready()
        after = engine.call_counts()
        return after[0] - before[0], after[1] - before[1]

    assert counts(1024) == (0, N)
    with _settings.override(async_calls=False):
        assert counts(1 << 18) == (N, 0)
    with _settings.override(async_calls=True, async_min_kb=64):
        assert counts(1024) == (N, 0)
        assert counts(1 << 18) == (0, N)
