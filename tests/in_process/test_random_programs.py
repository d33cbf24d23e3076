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
from random_programs import draw, mismatch

SEEDS = 480
CHUNKS = 8  # test cases, so that xdist's workers share them


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_programs_match_lax(chunk):
    ran = 0
    for seed in range(chunk, SEEDS, CHUNKS):
        answered, differs = mismatch(draw(seed, jax.devices()), jlax)
        assert not differs, differs
        ran += answered
    assert ran > SEEDS // CHUNKS // 2  # most programs are valid ones
