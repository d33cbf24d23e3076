"""The layout's rules (docs/layout.md), read from the sources: XLA and Python meet the engine
only in xla_ffi/handlers/, which holds nothing but adapters; includes between the engine's
folders point one way; the public pytest plugin depends on nothing under the benchmark CLI;
jax_jaccl's internal modules are named with a leading underscore; settings are read in one
place (jax_jaccl/_settings.py), never by the engine itself; and jax's internals only in
jax_jaccl/_compat/."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENGINE = ROOT / "xla_ffi"
PACKAGE = ROOT / "jax_jaccl"

# Each folder of the engine, and the folders it may include from (besides itself).
MAY_INCLUDE = {
    "common": set(),
    "transport": {"common"},
    "comm": {"common", "transport"},
    "collectives": {"common", "transport", "comm"},
    "moe": {"common", "transport", "comm", "collectives"},
    "cuda": {"common", "collectives", "moe"},
    # the C interface between the engine and the process's other modules (_jaccl_cuda, the mpiabi
    # library)
    "abi": {"common", "transport", "comm", "collectives", "moe"},
    "handlers": {"common", "transport", "comm", "collectives", "moe", "cuda", "abi"},
    "mpiabi": {"abi"},  # the C interfaces, nothing else (MPI_ABI_INTERFACES)
}
# What the mpiabi library (plain C, a library of its own) may include of the engine: C headers only.
MPI_ABI_INTERFACES = {"abi/host_abi.h", "abi/mpiabi_table.h"}
XLA_OR_PYTHON = re.compile(r'#include [<"](xla/ffi/|nanobind/)')


def sources():
    for path in sorted(ENGINE.rglob("*")):
        if path.suffix in (".h", ".c", ".cc", ".cu", ".cuh"):
            yield path.relative_to(ENGINE).as_posix(), path.read_text()


def test_only_handlers_see_xla_or_python():
    leaks = [name for name, text in sources()
             if not name.startswith("handlers/") and XLA_OR_PYTHON.search(text)]
    assert leaks == [], f"outside xla_ffi/handlers/, these include XLA's FFI or nanobind: {leaks}"


def test_handlers_hold_adapters_only():
    """Every file of handlers/ turns XLA or Python types into engine calls (it includes XLA's
    FFI or nanobind, or uses their types); the engine logic they once held lives below
    (collectives/run.h, moe/run.h, cuda/)."""
    plain = [name for name, text in sources() if name.startswith("handlers/")
             and not XLA_OR_PYTHON.search(text)
             and not re.search(r"\b(ffi|nb)::", text)]
    assert plain == [], f"handlers/ files that adapt nothing of XLA or Python: {plain}"


def test_includes_point_one_way():
    wrong = []
    for name, text in sources():
        folder = name.split("/")[0]
        for included in re.findall(r'#include "([a-z_]+)/', text):
            if included != folder and included in MAY_INCLUDE and included not in MAY_INCLUDE[folder]:
                wrong.append(f"{name} includes {included}/")
    assert wrong == [], "\n".join(wrong)


def test_mpiabi_includes_c_interfaces_only():
    """libjaccl_mpiabi.so is plain C loaded with RTLD_DEEPBIND: no C++ header, no engine code."""
    wrong = [f"{name} includes {included}" for name, text in sources() if name.startswith("mpiabi/")
             for included in re.findall(r'#include "([a-z_]+/[a-z_.]+)"', text)
             if included not in MPI_ABI_INTERFACES]
    assert wrong == [], wrong


def test_the_pytest_plugin_does_not_depend_on_the_benchmark():
    importers = [p.relative_to(ROOT).as_posix() for p in (PACKAGE / "testing").rglob("*.py")
                 if re.search(r"from \.\.bench|jax_jaccl\.bench|from \.\.\s+import bench",
                              p.read_text())]
    assert importers == []


@pytest.mark.parametrize("module", ["bootstrap", "ops", "compat", "ordering", "ext", "codes", "settings"])
def test_internal_modules_start_with_an_underscore(module):
    assert not (PACKAGE / f"{module}.py").exists() and not (PACKAGE / module).is_dir()
    assert (PACKAGE / f"_{module}.py").exists() or (PACKAGE / f"_{module}").is_dir()


def test_the_engine_never_reads_the_environment():
    """Settings reach C++ through configure() (jax_jaccl/_settings.py reads them once)."""
    readers = [name for name, text in sources() if re.search(r"\b(std::)?(getenv|secure_getenv)\s*\(", text)]
    assert readers == [], f"these engine files read the environment: {readers}"


def test_only_the_settings_module_reads_jaccl_variables():
    """Everywhere else in the package takes JACCL_* settings from _settings (the pytest
    plugin's own JACCL_TEST_* / JACCL_PYTEST_* protocol aside); setting a variable for a
    process about to start is no read."""
    name = r"""["']JACCL_(?!TEST_|PYTEST_)"""
    reading = re.compile(rf"""environ\.get\(\s*{name}|getenv\(\s*{name}"""
                         rf"""|environ\[\s*{name}\w+["']\s*\](?!\s*=[^=])""")
    readers = [p.relative_to(PACKAGE).as_posix() for p in sorted(PACKAGE.rglob("*.py"))
               if p.name != "_settings.py" and reading.search(p.read_text())]
    assert readers == [], f"these modules read JACCL_* variables themselves: {readers}"


def test_only_the_compat_package_imports_jax_internals():
    """jax_jaccl/_compat/ is the one place that reads jax._src (its INTERNALS list names each
    internal: test_jax_internals.py)."""
    statement = re.compile(r"^\s*(from jax\._src[\s.]|import jax\._src)", re.M)
    compat = PACKAGE / "_compat"
    readers = [str(p.relative_to(ROOT)) for p in sorted(PACKAGE.rglob("*.py"))
               if compat not in p.parents and statement.search(p.read_text())]
    assert readers == [], f"these import jax._src outside jax_jaccl/_compat/: {readers}"
