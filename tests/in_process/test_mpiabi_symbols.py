"""jaccl's mpiabi library (libjaccl_mpiabi.so) stands where MPItrampoline, linked into jaxlib,
expects an MPI wrapper: at `import jax` the trampoline resolves every name of its ABI in it and ends
the process at the first one missing. So the mpiabi library exports exactly
xla_ffi/mpiabi/abi_symbols.txt (and jaccl's own functions), and that list is the one the installed
jaxlib's trampoline asks for: a jaxlib whose trampoline wants a new name fails here, naming it, not
at a user's import."""

from __future__ import annotations

import pathlib
import re

import jaxlib

from jax_jaccl import _xla_collectives
from module_symbols import exported

LIST = pathlib.Path(__file__).resolve().parents[2] / "xla_ffi" / "mpiabi" / "abi_symbols.txt"
# One pattern per prefix: a literal start lets `re` skip through jaxlib's ~300 MiB quickly.
ABI_NAMES = [re.compile(p) for p in (rb"MPIX?ABI_\w+", rb"mpiwrapper_\w+", rb"mpiabi_version_\w+")]


def abi_names(data: bytes) -> set[str]:
    """The MPI ABI names in `data` that start a word."""
    return {m.group().decode() for pattern in ABI_NAMES for m in pattern.finditer(data)
            if m.start() == 0 or not re.match(rb"\w", data[m.start() - 1:m.start()])}


def listed() -> set[str]:
    return {line.split()[-1] for line in LIST.read_text().splitlines()
            if line.strip() and not line.startswith("#")}


def test_the_list_is_what_the_installed_jaxlib_resolves():
    library = pathlib.Path(jaxlib.__file__).parent / "libjax_common.so"
    wanted = abi_names(library.read_bytes())
    assert len(wanted) > 600, f"found only {len(wanted)} MPI ABI names in {library}"
    assert sorted(wanted - listed()) == [], "the trampoline asks for names the mpiabi library lacks"
    assert sorted(listed() - wanted) == [], "the list names symbols this jaxlib does not ask for"


def test_mpiabi_exports_the_list_and_nothing_else():
    names = set(exported(_xla_collectives.library_path()))
    # jaccl's own: what _jaccl's attach and jax_jaccl._xla_collectives (ctypes) call
    assert names == listed() | {"jaccl_mpiabi_attach", "jaccl_mpiabi_expect", "jaccl_mpiabi_refuse",
                                "jaccl_mpiabi_renew_failed", "jaccl_mpiabi_came_back",
                                "jaccl_mpiabi_recoverable", "jaccl_mpiabi_served",
                                "jaccl_mpiabi_group_refused"}


def test_the_scan_takes_whole_names_only():
    data = b"MPIABI_Init\0xMPIABI_Recv\0MPIXABI_Comm_f2c\0_mpiwrapper_y\0mpiabi_version_major"
    assert abi_names(data) == {"MPIABI_Init", "MPIXABI_Comm_f2c", "mpiabi_version_major"}
