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

import test_moe
from test_algorithms import (test_all_reduce_algorithms, test_groups_of_a_2d_mesh,  # noqa: F401
                             test_many_collectives_in_one_program_keep_their_order,
                             test_reduce_scatter_and_all_gather_algorithms)
from test_ragged_all_to_all import test_matches_the_model  # noqa: F401


@pytest.mark.parametrize("case", test_moe.CASES)
def test_moe_dispatch_and_combine_in_float32(case):
    test_moe.test_dispatch_and_combine_match_reference(case, np.float32)


@pytest.fixture(autouse=True)
def every_call_on_the_device_threads():
    with _settings.override(async_calls=True, async_min_kb=0):
        yield
