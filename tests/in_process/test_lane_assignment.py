"""Every chain of jaccl calls (the collectives of one block) gets a lane at lowering
(jax_jaccl/_ordering.py lane_of, the handlers' `lane` attribute), the
same on every process that lowers the program: calls of different lanes may be in flight at
once on one device (tests/processes/test_lanes.py runs ranks that take them in opposite
orders)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jax_jaccl as jaccl
from jax_jaccl import _settings

from util import N, on_mesh, sites


def lanes(f, *args) -> list[int]:
    return sites(f, *args, attribute="lane")


def nested(count):
    """A body that calls `count` nested jits, each with one all_reduce (a chain each)."""
    chains = [jax.jit(lambda v, k=k: jaccl.all_reduce(v * (k + 1), "x")) for k in range(count)]
    return lambda v: sum(chain(v) for chain in chains)


def test_the_calls_of_one_block_share_lane_zero():
    f, x = on_mesh(lambda v: jaccl.all_reduce(jaccl.all_gather(v, "x", tiled=True)[:v.shape[0]],
                                              "x"))
    assert lanes(f, x) == [0, 0]


def test_each_chain_has_a_lane_of_its_own_and_lowering_again_gives_the_same():
    f, x = on_mesh(nested(3))
    assert lanes(f, x) == [0, 1, 2]
    assert lanes(f, x) == [0, 1, 2]


def test_more_chains_than_lanes_wrap_around():
    f, x = on_mesh(nested(5))
    assert lanes(f, x) == [0, 1, 2, 3, 0]  # JACCL_LANES=4
    with _settings.override(lanes=2):  # a program of its own: jax caches lowerings
        g, y = on_mesh(nested(5))
        assert lanes(g, y) == [0, 1, 0, 1, 0]


def test_the_branches_of_a_cond_share_a_lane():
    """Only one branch runs, so they need no lanes of their own."""
    def body(v):
        first = jaccl.all_reduce(v, "x")
        return jax.lax.cond(v[0] > 0, lambda u: jaccl.all_reduce(u, "x"),
                            lambda u: jaccl.all_reduce(u * 2, "x"), first)
    f, x = on_mesh(body)
    assert lanes(f, x) == [0, 1, 1]


def test_one_lane_puts_every_call_in_lane_zero():
    with _settings.override(lanes=1):
        f, x = on_mesh(nested(3))
        assert lanes(f, x) == [0, 0, 0]


def test_two_chains_of_a_program_give_numpy_results_on_every_device():
    """The chains run in lanes 0 and 1 of every device (in one process: the direct path)."""
    one = jax.jit(lambda v: jaccl.all_reduce(jnp.sin(jaccl.all_reduce(v, "x")), "x"))
    two = jax.jit(lambda v: jaccl.all_gather(jaccl.all_reduce(v * 3, "x"), "x", tiled=True))
    f, x = on_mesh(lambda v: one(v) + two(v)[:v.shape[0]])
    assert lanes(f, x) == [0, 0, 1, 1]
    v = np.ones(N * 8, np.float32)
    want = N * np.sin(np.float32(N)) + 3 * N
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(jax.jit(f)(x)), np.full_like(v, want), rtol=1e-6)
