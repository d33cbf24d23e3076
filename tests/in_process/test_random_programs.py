"""Random programs (tests/support/random_programs.py), one process x 4 devices: each of jax.lax's
collectives with drawn arguments, dtypes, shapes, meshes, orders of axes and float edges, plain,
under vmap, under grad and with axis_index_groups, alone or chained with one or two more, run
with jax.lax and with jax_jaccl.lax.
Where jax.lax answers, jaccl's answer has the same shape, dtype and bits; where jax.lax
refuses the program, so does jaccl (the first of two faults may be named differently). The
exceptions are failures inside jax itself that jaccl's rules do not share (JAX_FAILURES)."""

from __future__ import annotations

import jax
import pytest

from jax_jaccl import lax as jlax
from random_programs import JAX_FAILURES, draw, outcome
from util import assert_equal

SEEDS = 480
CHUNKS = 8  # test cases, so that xdist's workers share them


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_programs_match_lax(chunk):
    ran = 0
    for seed in range(chunk, SEEDS, CHUNKS):
        program = draw(seed, jax.devices())
        want, got = outcome(program, jax.lax), outcome(program, jlax)
        if want[0] == "raised":
            if got[0] == "ok" and any(k in str(want[1]) for k in JAX_FAILURES):
                continue
            assert got[0] == "raised", f"{program}: jax.lax raised {want[1]!r}, jaccl answered"
            continue
        assert got[0] == "ok", f"{program}: jax.lax answered, jaccl raised {got[1]!r}"
        assert got[1].keys() == want[1].keys(), program
        for block in want[1]:
            assert_equal(got[1][block], want[1][block], err_msg=f"{program}, block {block}")
        ran += 1
    assert ran > SEEDS // CHUNKS // 2  # most programs are valid ones
