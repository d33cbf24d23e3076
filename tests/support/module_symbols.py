"""What a built extension module shows the process that loads it, read with binutils' nm.

exported(path): the names in its dynamic symbol table that it defines (what other objects in
the process could bind to). stream_or_locale(path): the symbols of libstdc++'s iostream and
locale machinery it defines, in its dynamic table or, where it was not stripped, its full
symbol table (a definition there is a private copy of that code inside the module)."""

from __future__ import annotations

import re
import shutil
import subprocess

STREAM_OR_LOCALE = re.compile(
    r"std::(?:__cxx11::)?(?:basic_(?:[io]?stream|iostream|[io]?stringstream|stringbuf|filebuf|"
    r"[io]?fstream|ios|streambuf)|ios_base|locale|ctype|codecvt|num_put|num_get|numpunct|"
    r"moneypunct|money_put|money_get|time_put|time_get|messages|collate|[io]stream)\b"
    r"|std::__ostream_insert")


def _nm(path, *flags) -> list[str]:
    nm = shutil.which("nm")
    assert nm, "binutils' nm is needed to read the modules' symbol tables"
    done = subprocess.run([nm, "-C", *flags, str(path)], capture_output=True, text=True)
    if "no symbols" in done.stderr:
        return []
    assert done.returncode == 0, done.stderr
    return [line.split(" ", 2)[-1] for line in done.stdout.splitlines() if line.strip()]


def exported(path) -> list[str]:
    return _nm(path, "-D", "--defined-only")


def stream_or_locale(path) -> list[str]:
    defined = set(_nm(path, "-D", "--defined-only")) | set(_nm(path, "--defined-only"))
    return sorted(name for name in defined if STREAM_OR_LOCALE.search(name))
