"""Numeric codes shared with the C++ engine (xla_ffi/collectives/kinds.h, common/reduce.h).

They travel in FFI attributes and frame headers: keep both sides in sync.
"""

REDUCE_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}

ALGORITHMS = {"auto": 0, "naive": 1, "mesh": 2, "ring": 3, "ring_oneway": 4, "direct": 5,
              "hierarchical": 6}

# Algorithms each op accepts through `algorithm=` (JACCL_ALGO is checked by the engine).
ALL_REDUCE_ALGORITHMS = ("auto", "naive", "mesh", "ring", "ring_oneway", "hierarchical")
REDUCE_SCATTER_ALGORITHMS = ("auto", "mesh", "ring", "ring_oneway", "hierarchical")
ALL_GATHER_ALGORITHMS = ("auto", "mesh", "ring", "ring_oneway")
