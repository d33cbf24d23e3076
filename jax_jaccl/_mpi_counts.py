"""XLA's collectives on jaccl pass their sizes to MPI as 32-bit ints: XLA narrows its size_t
as it calls MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter (elements) and MPI_Isend,
MPI_Irecv, MPI_Sendrecv (bytes, for collective-permute and all-to-all). A collective of 2^31
elements (or bytes) reaches jaccl's mpiabi library as a negative count, which it refuses; one of
2^32 or more as the count modulo 2^32, which it cannot tell from a real one: a silent wrong answer.
So each program is checked as it compiles, where every collective's shapes are known.

Contract: refuse_past_int(devices, program) raises ValueError naming the first collective of
`program` (an _compat.CompiledProgram) whose count XLA would narrow past MPI's int, and what to
do instead, where XLA's collectives run on jaccl's mpiabi library (_xla_collectives.active()); else
nothing. install() adds it to the checks after each compilation (once): jaccl-run's processes
get it as jax loads (_cluster.py), the others when jaccl attaches the mpiabi library
(_bootstrap.py).
"""

from __future__ import annotations

import re

LIMIT = 1 << 31  # MPI's int holds counts below it

# One HLO instruction: `%name = shape op(operands), attributes`; the shape a type
# (`f32[16,4]{1,0}`) or a tuple of them.
_INSTRUCTION = re.compile(r"^(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s([a-z][\w\-]*)\(")
_SHAPE = re.compile(r"\b(pred|[a-z]+\d+[a-z0-9]*)\[([\d,]*)\]")
_OPERAND = re.compile(r"%([\w.\-]+)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')

# What XLA passes MPI for each collective: the count of which shapes, in elements or bytes.
_COUNTED = {"all-reduce": ("operands", "elements"), "all-gather": ("operands", "elements"),
            "reduce-scatter": ("results", "elements"),
            "collective-permute": ("operands", "bytes"), "all-to-all": ("operands", "bytes")}


def _bytes_per_element(dtype: str) -> int:
    bits = re.search(r"\d+", dtype)
    return 1 if dtype == "pred" or bits is None else max(1, int(bits.group()) // 8)


def _shapes(text: str) -> list:
    """[(dtype, elements)] of every array type in `text`."""
    shapes = []
    for dtype, dims in _SHAPE.findall(text):
        elements = 1
        for d in filter(None, dims.split(",")):
            elements *= int(d)
        shapes.append((dtype, elements))
    return shapes


def _operands(line: str, start: int) -> str:
    """The text between the parenthesis at line[start] and the one that closes it."""
    depth = 0
    for i in range(start, len(line)):
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        if depth == 0:
            return line[start + 1:i]
    return line[start + 1:]


def _group_size(line: str) -> int:
    """The size of an array all-to-all's groups (it sends operand / size to each member), from
    its replica_groups in the forms XLA prints (_xla_groups.line_groups); 1 where none is read
    (the whole operand)."""
    from . import _xla_groups

    try:
        listed = _xla_groups.line_groups(line)
    except ValueError:
        return 1
    return len(listed[0]) if listed else 1


def past_int(module_text: str):
    """(op, its op_name, the count, "elements" or "bytes") of the first collective in one HLO
    module whose count XLA would narrow past MPI's int, or None."""
    shape_of = {}
    for line in module_text.splitlines():
        m = _INSTRUCTION.match(line.strip())
        if m:
            shape_of[m.group(1)] = m.group(2)
    for line in module_text.splitlines():
        line = line.strip()
        m = _INSTRUCTION.match(line)
        op = m and m.group(3).removesuffix("-start")
        if op not in _COUNTED:
            continue
        which, unit = _COUNTED[op]
        if which == "results":
            shapes = _shapes(m.group(2))
        else:
            inside = _operands(line, m.end() - 1)
            shapes = _shapes(inside) or [s for name in _OPERAND.findall(inside)
                                        for s in _shapes(shape_of.get(name, ""))]
        split = _group_size(line) if op == "all-to-all" and len(shapes) == 1 else 1
        for dtype, elements in shapes:
            count = elements * (_bytes_per_element(dtype) if unit == "bytes" else 1) // split
            if count >= LIMIT:
                where = _OP_NAME.search(line)
                return op, where.group(1) if where else m.group(1), count, unit
    return None


def refuse_past_int(devices, program) -> None:
    del devices
    from . import _xla_collectives

    if not _xla_collectives.active():
        return
    for text in program.module_texts:
        found = past_int(text)
        if found:
            op, where, count, unit = found
            raise ValueError(
                f"jaccl: this program's {op} ({where}) moves {count} {unit}, a count XLA hands "
                f"its MPI collectives as a 32-bit int ({count} becomes "
                f"{(count + LIMIT) % (2 * LIMIT) - LIMIT}): on jaccl's mpiabi library that fails "
                f"or, past 2^32, moves the wrong amount. Split the array into pieces below 2^31 "
                f"{unit}, use jaccl's own collectives (jax_jaccl.lax), or run XLA's collectives "
                "on gloo (jaccl-run --xla-collectives gloo)")


def install() -> None:
    from . import _compat

    _compat.after_each_compile(refuse_past_int)
