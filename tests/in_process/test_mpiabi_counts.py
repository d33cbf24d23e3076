"""XLA:CPU narrows a collective's element count to MPI's int, so one of 2^31 to 2^32 - 1
elements reaches jaccl's mpiabi library negative. The mpiabi library refuses it, naming the count it
was (it used to widen it to a size_t of about 2^64 and crash). Called here as XLA calls it, through
the MPI ABI; the count check comes before any communicator is looked at."""

from __future__ import annotations

import ctypes

import pytest

from jax_jaccl import _xla_collectives

ELEMENTS = 2**31 + 5  # an int8[2**31 + 5] psum: the count XLA passes is ELEMENTS - 2**32
AS_INT = ELEMENTS - 2**32


def error_text(lib, code: int) -> str:
    text, length = ctypes.create_string_buffer(1024), ctypes.c_int()
    lib.MPIABI_Error_string(code, text, ctypes.byref(length))
    return text.value.decode()


@pytest.mark.parametrize("call", ["MPI_Allreduce", "MPI_Reduce_scatter_block", "MPI_Allgather"])
def test_a_count_past_int_max_is_refused_naming_it(call):
    lib = ctypes.CDLL(_xla_collectives.library_path())
    handle = ctypes.c_size_t(0)  # never reached: the count is checked first
    if call == "MPI_Allgather":
        code = lib.MPIABI_Allgather(None, ctypes.c_int(AS_INT), handle, None, ctypes.c_int(AS_INT),
                                    handle, handle)
    else:
        code = getattr(lib, call.replace("MPI_", "MPIABI_"))(None, None, ctypes.c_int(AS_INT),
                                                            handle, handle, handle)
    assert code != 0
    text = error_text(lib, code)
    assert f"{call} of {ELEMENTS} elements ({AS_INT} once XLA made it an MPI int)" in text, text
    assert "32-bit" in text, text
