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

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_the_installed_modules_have_an_api_this_jax_accepts():
    running = _ext.running_ffi_api()
    assert running is not None, "jaxlib ships no xla/ffi/api/c_api.h"
    assert _ext.engine.ffi_api_version() <= running
    if _ext.cuda_engine is not None:
        assert _ext.cuda_engine.ffi_api_version() <= running


def test_a_module_of_a_newer_api_is_refused_naming_both_and_the_fix():
    with pytest.raises(ImportError, match=r"_jaccl was built with XLA FFI API 0\.5 .* has API 0\.4 "
                                          r"and refuses its handlers: .*--no-build-isolation"):
        _ext.check_ffi_api("_jaccl", (0, 5), (0, 4))


@pytest.mark.parametrize("built, running", [((0, 3), (0, 5)), ((0, 4), (0, 4)), ((0, 5), None)])
def test_an_older_or_equal_api_or_an_unknown_jax_is_accepted(built, running):
    _ext.check_ffi_api("_jaccl", built, running)


def test_pip_builds_with_the_oldest_supported_jax():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    (pin,) = [r for r in project["build-system"]["requires"] if r.startswith("jax")]
    (dependency,) = [d for d in project["project"]["dependencies"] if d.startswith("jax")]
    oldest = re.search(r">=\s*([\d.]+)", dependency).group(1)
    assert pin == f"jax=={oldest}", (pin, dependency)
