"""Every jaccl custom call carries the site it was written at (jax_jaccl/_call_site.py): the
same on every process that lowers the program, different for collectives written in
different places, so that alike collectives of different places never pair across ranks
(tests/processes/test_faults.py runs that)."""

from __future__ import annotations


import jax

import jax_jaccl as jaccl

from util import on_mesh, sites


def two_lines(v):
    a = jaccl.all_reduce(v, "x")
    b = jaccl.all_reduce(v, "x")
    return a + b


def test_alike_collectives_on_two_lines_have_two_sites_and_lowering_again_gives_the_same():
    f, x = on_mesh(two_lines)
    first = sites(f, x)
    assert len(first) == 2 and first[0] != first[1] and 0 not in first
    assert sites(f, x) == first
    g, y = on_mesh(two_lines)  # another jit of the same code: the same sites
    assert sites(g, y) == first


def test_one_line_called_in_a_python_loop_gives_a_site_per_call():
    f, x = on_mesh(lambda v: sum(jaccl.all_reduce(v * k, "x") for k in range(3)))
    found = sites(f, x)
    assert len(found) == 3 and len(set(found)) == 3


def test_a_collective_and_its_transpose_differ():
    loss = lambda w: (jaccl.all_gather(w, "x", tiled=True) ** 2).sum()  # noqa: E731
    f, x = on_mesh(lambda v: jax.grad(loss)(v))
    found = sites(f, x)
    assert len(found) == 2 and found[0] != found[1], found


def test_the_directory_a_program_runs_from_does_not_change_its_sites():
    """Processes of one job may run the same file from different checkouts."""
    source = "def model(v):\n    return jaccl.all_reduce(v, 'x')\n"
    made = []
    for where in ("/srv/a/model.py", "/home/b/checkout/model.py"):
        scope = {"jaccl": jaccl}
        exec(compile(source, where, "exec"), scope)
        f, x = on_mesh(scope["model"])
        made.append(sites(f, x))
    assert made[0] == made[1]


def test_without_call_sites_every_site_is_zero():
    """JACCL_CALL_SITES=0: calls pair by order only (ranks that write one collective on
    different lines)."""
    from jax_jaccl import _settings

    f, x = on_mesh(two_lines)
    with _settings.override(call_sites=False):
        assert sites(f, x) == [0, 0]
