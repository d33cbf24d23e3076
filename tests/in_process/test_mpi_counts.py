"""XLA hands MPI its collectives' sizes as 32-bit ints, so jaccl refuses, as it compiles, a
program whose collective would pass 2^31 elements (all-reduce, all-gather's operand,
reduce-scatter's result) or 2^31 bytes (collective-permute, each all-to-all chunk) where XLA's
collectives run on jaccl's mpiabi library: past 2^32 the mpiabi library would get a small count it
cannot tell from a real one. Each op is compiled (never run) on 4 in-process devices, one element
below and at the limit, from the HLO text of this jax's compiler (its printing differs by
version)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from jax_jaccl import _mpi_counts, _xla_collectives

LIMIT = 1 << 31
PAIRS = [(0, 1), (1, 0), (2, 3), (3, 2)]

# (op, what XLA counts, jax's function, elements a device holds at the limit, dtype)
CASES = [
    ("all-reduce", "elements", lambda v: jax.lax.psum(v, "x"), LIMIT, jnp.int8),
    ("all-gather", "elements", lambda v: jax.lax.all_gather(v, "x", tiled=True), LIMIT, jnp.int8),
    ("reduce-scatter", "elements", lambda v: jax.lax.psum_scatter(v, "x", tiled=True), 4 * LIMIT,
     jnp.int8),
    ("collective-permute", "bytes", lambda v: jax.lax.ppermute(v, "x", PAIRS), LIMIT // 4,
     jnp.float32),
    ("all-to-all", "bytes", lambda v: jax.lax.all_to_all(v, "x", 0, 0, tiled=True), LIMIT,
     jnp.float32),  # chunks of a quarter of a device's float32 block: as many bytes as elements
]


def compiled(body, elements, dtype):
    mesh = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,),
                         devices=jax.devices()[:4])
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    return f.lower(jax.ShapeDtypeStruct((4 * elements,), dtype,
                                        sharding=NamedSharding(mesh, P("x")))).compile()


def found(executable):
    return [_mpi_counts.past_int(m.to_string()) for m in executable.runtime_executable().hlo_modules()]


@pytest.mark.parametrize("op, unit, body, at_limit, dtype", CASES, ids=[c[0] for c in CASES])
def test_the_limit_of_each_collective(op, unit, body, at_limit, dtype):
    step = 4 if op in ("reduce-scatter", "all-to-all") else 1  # a device's block splits in 4
    assert found(compiled(body, at_limit - step, dtype)) == [None]
    ((name, where, count, counted),) = found(compiled(body, at_limit, dtype))
    assert (name, count, counted) == (op, LIMIT, unit)
    assert where.startswith("jit(")


def test_a_program_past_the_limit_fails_to_compile_where_xla_uses_mpiabi(monkeypatch):
    _mpi_counts.install()
    body = lambda v: jax.lax.psum(v, "x")  # noqa: E731
    compiled(body, (1 << 32) + 5, jnp.int8)  # XLA's collectives in-process: not on mpiabi
    monkeypatch.setattr(_xla_collectives, "active", lambda: True)
    with pytest.raises(ValueError, match=r"all-reduce .* moves 4294967301 elements, .* "
                                         r"\(4294967301 becomes 5\)"):
        compiled(lambda v: jax.lax.psum(v, "x") + 1, (1 << 32) + 5, jnp.int8)
    compiled(lambda v: jax.lax.psum(v, "x") * 2, 1 << 20, jnp.int8)
