"""Message sizes, iteration counts and bandwidth formulas shared by every benchmark worker.

Contract: every rank of a job derives the same iteration count from the size alone (never
from its own timings), so the ranks always run the same number of collectives.
nccl-tests conventions: S is the per-rank buffer of all_reduce, the input of
reduce_scatter and the output of all_gather; algbw = S / t; busbw = algbw * 2(n-1)/n for
all_reduce and algbw * (n-1)/n for reduce_scatter and all_gather. ppermute: S sent by every
rank, busbw = algbw. ragged_all_to_all: S is the padded buffer (what a padded all_to_all
moves), busbw = algbw * (n-1)/n of that padded exchange, whatever share of it is filled.
"""

from __future__ import annotations

DEFAULT_SIZES = "4K,64K,1M,16M,64M"
OPS = ("all_reduce", "reduce_scatter", "all_gather")
EVERY_OP = OPS + ("ppermute", "ragged_all_to_all")


def parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * scale)


def parse_sizes(text: str) -> list[int]:
    return [parse_size(t) for t in text.split(",") if t.strip()]


def human(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def iterations(nbytes: int, budget_bytes: int = 1 << 30) -> int:
    """About `budget_bytes` moved per measurement, between 5 and 200 calls."""
    return max(5, min(200, budget_bytes // max(nbytes, 1)))


def bus_factor(op: str, n: int) -> float:
    if op == "ppermute":
        return 1.0
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
