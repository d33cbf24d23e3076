"""Numeric codes shared with the C++ engine (xla_ffi/collectives/kinds.h, common/reduce.h).

They travel in FFI attributes and frame headers: keep both sides in sync.
"""

REDUCE_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}

ALGORITHMS = {"auto": 0, "naive": 1, "mesh": 2, "ring": 3, "ring_oneway": 4}

# Algorithms each op accepts through `algorithm=` (JACCL_ALGO is checked by the engine).
ALL_REDUCE_ALGORITHMS = ("auto", "naive", "mesh", "ring", "ring_oneway")
REDUCE_SCATTER_ALGORITHMS = ("auto", "mesh", "ring", "ring_oneway")
ALL_GATHER_ALGORITHMS = ("auto", "mesh", "ring", "ring_oneway")
