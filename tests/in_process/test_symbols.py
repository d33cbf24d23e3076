"""The extensions are guests in other people's processes (JAX, XLA's GPU plugin, whatever else
is loaded). Each exports its PyInit_ function and nothing else: an exported engine function or
a weak std:: template instantiation could be bound by, or bind to, another library's copy. And
neither carries libstdc++'s stream or locale code: a module linked with -static-libstdc++ has
a copy of its own whose facets were never set up (tests/builds/test_toolchains.py).

What remains: XLA's own header xla/ffi/api/ffi.h includes <iostream> and builds its decoding
diagnostics with std::stringstream, so the handlers still reference libstdc++'s stream code on
the path where XLA hands a handler arguments its binding does not match; the engine's own
sources use none (test_engine_sources_use_no_iostreams)."""

from __future__ import annotations

import pathlib
import re

import pytest

import jax_jaccl._ext as ext
from module_symbols import exported, stream_or_locale

ENGINE = pathlib.Path(__file__).resolve().parents[2] / "xla_ffi"

MODULES = [pytest.param(ext.engine, id="_jaccl"),
           pytest.param(ext.cuda_engine, id="_jaccl_cuda", marks=pytest.mark.skipif(
               ext.cuda_engine is None, reason="CPU-only build: no _jaccl_cuda"))]


def module_name(module) -> str:
    return module.__name__.rsplit(".", 1)[-1]


@pytest.mark.parametrize("module", MODULES)
def test_module_exports_its_init_function_alone(module):
    assert exported(module.__file__) == [f"PyInit_{module_name(module)}"]


@pytest.mark.parametrize("module", MODULES)
def test_module_defines_no_stream_or_locale_code(module):
    assert stream_or_locale(module.__file__) == []


FORBIDDEN = re.compile(
    r"#\s*include\s*<(?:iostream|[io]?stream|sstream|[io]?fstream|iomanip|locale|streambuf)>"
    r"|std::(?:cout|cerr|clog|[io]?stringstream|[io]?fstream|[io]?stream\b|getline|put_time|"
    r"setw|setprecision|hex\b|dec\b)")


def test_engine_sources_use_no_iostreams():
    """Text goes through common/text.h; files are read with POSIX calls."""
    found = []
    for path in sorted(ENGINE.rglob("*")):
        if path.suffix not in {".cc", ".h", ".cu", ".cuh"}:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if FORBIDDEN.search(line.split("//", 1)[0]):  # comments may name them
                found.append(f"{path.relative_to(ENGINE.parent)}:{number}: {line.strip()}")
    assert found == [], "\n".join(found)


def test_checks_see_what_they_look_for():
    """The patterns match the symbols and lines they exist to catch."""
    from module_symbols import STREAM_OR_LOCALE

    for symbol in ("std::basic_ostream<char, std::char_traits<char> >& std::basic_ostream<char, "
                   "std::char_traits<char> >::_M_insert<long>(long)",
                   "std::codecvt<char16_t, char, __mbstate_t>::do_unshift(__mbstate_t&) const",
                   "std::ctype<char>::do_widen(char) const", "std::locale::id::_M_id() const",
                   "std::__cxx11::basic_ostringstream<char>::~basic_ostringstream()"):
        assert STREAM_OR_LOCALE.search(symbol), symbol
    assert not STREAM_OR_LOCALE.search("std::vector<int, std::allocator<int> >::_M_realloc_insert")
    for line in ("#include <sstream>", "  std::ostringstream out;", "std::ifstream f(path);",
                 "out << std::hex << x;"):
        assert FORBIDDEN.search(line), line
    assert not FORBIDDEN.search('#include "common/text.h"')
