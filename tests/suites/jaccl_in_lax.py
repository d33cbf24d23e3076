"""pytest plugin (`-p jaccl_in_lax`, with tests/suites on PYTHONPATH): jax_jaccl.lax's functions
in jax.lax's place, set on the jax.lax module as a conftest.py can, before any test module is
imported, so that a project's tests and library code that call `jax.lax.psum` or `lax.psum` run
jaccl's collectives. jaccl's own fallbacks to jax.lax (constants, axes that jax.vmap bound, axes
of one member) call jax._src.lax.parallel (jax_jaccl._compat.lax_parallel), never jax.lax, so
they do not come back here.

Its closing line, which run_suites.py reads, says whether the swap still held after the last
test and how many tests bound one of jaccl's collective primitives (traced a jaccl op rather
than a fallback): a suite whose tests all pass with none of them is no evidence about jaccl.
A test that only reruns a program compiled by an earlier test is not counted. Their node ids go
to the file $SUITES_TRACING_LIST names, where it is set."""

import importlib
import os

import jax
import pytest

from jax_jaccl import _compat
from jax_jaccl import lax as jaccl_lax

SWAPPED = tuple(jaccl_lax.__all__)
OPS = ("all_gather", "all_reduce", "all_to_all", "ppermute", "ragged_all_to_all", "reduce_scatter")
tracing = set()   # node ids of the tests that bound a jaccl primitive
current = None    # the test running now


def _count_binds(primitive):
    bind = primitive.bind

    def counting_bind(*args, **params):
        if current is not None:
            tracing.add(current)
        return bind(*args, **params)

    primitive.bind = counting_bind


def pytest_configure(config):
    for name in SWAPPED:
        setattr(jax.lax, name, getattr(jaccl_lax, name))
    for op in OPS:
        module = importlib.import_module(f"jax_jaccl._ops.{op}")
        for value in vars(module).values():
            if isinstance(value, _compat.Primitive):
                _count_binds(value)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global current
    current = item.nodeid
    try:
        return (yield)
    finally:
        current = None


def pytest_terminal_summary(terminalreporter):
    kept = [n for n in SWAPPED if getattr(jax.lax, n) is getattr(jaccl_lax, n)]
    terminalreporter.write_line(f"jaccl_in_lax: {len(kept)} of {len(SWAPPED)} jax.lax names "
                                f"were jax_jaccl.lax's at the end; {len(tracing)} tests traced "
                                "a jaccl op")
    if os.environ.get("SUITES_TRACING_LIST"):
        with open(os.environ["SUITES_TRACING_LIST"], "w") as out:
            out.writelines(f"{test}\n" for test in sorted(tracing))
