"""The jax internals jax_jaccl reads, all behind jax_jaccl/_compat/ (test_layout.py checks that
no other module imports jax._src): each one named in _compat.INTERNALS exists in the installed
jax, so a jax that removes one fails here, naming it, rather than somewhere in a lowering."""

from __future__ import annotations

import importlib

import jax
import jaxlib
import pytest

from jax_jaccl import _compat


def present(module: str, attribute: str) -> bool:
    """`module` is a module's name, or a module's name and attributes after it (jaxlib's
    extension, jax._src.lib._jax, is an attribute of jax._src.lib, not an importable module)."""
    head, rest = module, []
    while True:
        try:
            found = importlib.import_module(head)
            break
        except ImportError:
            if "." not in head:
                return False
            head, last = head.rsplit(".", 1)
            rest.insert(0, last)
    for name in rest + [attribute]:
        if not hasattr(found, name):
            return False
        found = getattr(found, name)
    return True


@pytest.mark.parametrize("module, attribute", _compat.INTERNALS,
                         ids=[f"{m}.{a}" for m, a in _compat.INTERNALS])
def test_every_internal_jaccl_reads_is_in_this_jax(module, attribute):
    assert present(module, attribute), (
        f"jax {jax.__version__} (jaxlib {jaxlib.__version__}) has no {module}.{attribute}, which "
        "jax_jaccl/_compat reads (docs/layout.md, 'jax internals', says what for): move _compat "
        "to what replaced it before widening pyproject's jax bound")


def test_the_optional_internals_are_named_right():
    """Those read with a fallback: at least the ones every supported jax has are found (a
    misspelt name would silently take the fallback everywhere)."""
    found = {(m, a) for m, a in _compat.OPTIONAL_INTERNALS if present(m, a)}
    assert ("jax._src.config", "_check_vma") in found
    assert ("jax._src.lax.parallel", "psum_invariant_p") in found
