"""The XLA FFI API a module was built with against the running jax's: XLA refuses handlers of
a newer API than its own (a module built with jax 0.12's headers under jax 0.11: every jaccl
op failed at its first use), so jax_jaccl refuses such a module at import, saying what to do;
pip builds with the oldest supported jax's headers (pyproject.toml), which every later jax
accepts (tests/builds/test_toolchains.py runs jobs on such a module)."""

from __future__ import annotations

import pathlib
import re
import tomllib

import pytest

from jax_jaccl import _ext
from util import pip_build_jax

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_this_jaxlib_ships_the_headers_the_check_reads():
    """Else the import-time check passes anything (running_ffi_api() is None)."""
    assert _ext.running_ffi_api() is not None


def test_a_module_of_a_newer_api_is_refused_naming_both_and_the_fix():
    with pytest.raises(ImportError, match=r"_jaccl was built with XLA FFI API 0\.5 .* has API 0\.4 "
                                          r"and refuses its handlers: .*--no-build-isolation"):
        _ext.check_ffi_api("_jaccl", (0, 5), (0, 4))


@pytest.mark.parametrize("built, running", [((0, 3), (0, 5)), ((0, 4), (0, 4)), ((0, 5), None)])
def test_an_older_or_equal_api_or_an_unknown_jax_is_accepted(built, running):
    _ext.check_ffi_api("_jaccl", built, running)


def test_pip_builds_with_the_oldest_supported_jax():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    (dependency,) = [d for d in project["project"]["dependencies"] if d.startswith("jax")]
    assert pip_build_jax() == re.search(r">=\s*([\d.]+)", dependency).group(1), dependency
