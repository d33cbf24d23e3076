"""A JAX compilation cache shared by the `jax_processes` jobs of one pytest session, so that a
program that several jobs compile (the same test over several layouts of the same mesh) is
compiled by the first and loaded by the others.

Contract: cache_env(config, xla_collectives) returns the environment variables that point a
rank's JAX at the cache named by the `jax_processes_compilation_cache` ini option, for a job
whose XLA collectives run on `xla_collectives` ("jaccl" or "gloo"): "" (the default) or "off":
none; "session": a temporary folder made on first use and removed when the session ends; any
other value: that folder, kept. Every program is written, however quick its compilation
(JAX's own thresholds would skip most CPU programs). Nothing is set where the environment
already names a cache (JAX_COMPILATION_CACHE_DIR): the user's choice stands. Nothing either for
a gloo job where gloo_hangs_on_cached_programs(): such a jax's gloo hangs running a program the
cache supplied (docs/xla-collectives.md, "jax 0.12.1's gloo and a warm compilation cache"), so
those jobs compile their own. Raises pytest.UsageError for a folder that cannot be made.

JAX writes entries from process 0 only, and on CPU keys a program by the process's own view of
the devices, so there only process 0 of the later jobs loads it (measured: a 4-process job of
the collective battery on 2 cores, 29 s -> 24 s). A rank that reads an entry while it is being
written gets a warning and compiles instead: never a wrong program.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from .._cpu_pool import jaxlib_version

OPTION = "jax_processes_compilation_cache"
_SESSION_FOLDER = pytest.StashKey[str]()
# The first jaxlib whose gloo hangs running a program loaded from the persistent compilation
# cache (checked here: 0.10.2 and 0.12.0.1 do not, 0.12.1 does), until a release is seen fixed:
# tests/processes/test_warm_cache.py pins it on whatever jax is installed.
GLOO_HANGS_FROM = (0, 12, 1)


def gloo_hangs_on_cached_programs() -> bool:
    """Whether the installed jax's gloo collectives hang in a program a warm persistent
    compilation cache supplied to one process of a job (the others compiling it)."""
    return jaxlib_version() >= GLOO_HANGS_FROM


def _folder(config) -> str | None:
    setting = str(config.getini(OPTION)).strip()
    if setting in ("", "off"):
        return None
    if setting != "session":
        try:
            os.makedirs(setting, exist_ok=True)
        except OSError as e:
            raise pytest.UsageError(f"{OPTION} = {setting!r}: cannot make the folder: {e}") from None
        return os.path.abspath(setting)
    if _SESSION_FOLDER not in config.stash:
        folder = tempfile.mkdtemp(prefix="jaccl-pytest-compile-cache-")
        config.stash[_SESSION_FOLDER] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    return config.stash[_SESSION_FOLDER]


def cache_env(config, xla_collectives: str) -> dict:
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return {}
    if xla_collectives == "gloo" and gloo_hangs_on_cached_programs():
        return {}
    folder = _folder(config)
    if folder is None:
        return {}
    return {"JAX_COMPILATION_CACHE_DIR": folder, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}
