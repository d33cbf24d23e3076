"""The numeric codes that travel in FFI attributes and frame headers, as the engine defines
them (xla_ffi/collectives/kinds.h, common/reduce.h): read from the extension at import, so
Python never holds a copy that could drift.

REDUCE_OPS and ALGORITHMS map names to codes; <OP>_ALGORITHMS are the names an op accepts
through `algorithm=` ("auto" first: the engine's choice).
"""

from ._ext import engine

_CODES = engine.codes()

REDUCE_OPS: dict = dict(_CODES["reduce_ops"])
ALGORITHMS: dict = dict(_CODES["algorithms"])


def _accepted(kind: str) -> tuple:
    return ("auto",) + tuple(_CODES["supported_algorithms"][kind])


ALL_REDUCE_ALGORITHMS = _accepted("all_reduce")
REDUCE_SCATTER_ALGORITHMS = _accepted("reduce_scatter")
ALL_GATHER_ALGORITHMS = _accepted("all_gather")
