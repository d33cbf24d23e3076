"""jaccl-bench kernels' result checks, which gate its table (a kernel whose result differs
from XLA's is reported and the command fails): bit for bit, and within one bfloat16 rounding
for the combine. The GPU table itself comes from tests/cuda/run_on_gpu.sh; the emulated-GPU
run of the command is in test_cuda_emulated.py."""

import jax.numpy as jnp
import numpy as np

from jax_jaccl.bench import kernels
from jax_jaccl.bench.kernels import Table


def test_bit_for_bit_check():
    a = jnp.asarray([1.0, -0.0, np.nan, 3.5], jnp.float32)
    assert kernels._same_bits(a, a) == "ok"
    assert kernels._same_bits(a, a.at[1].set(0.0)).startswith("MISMATCH: 1 elements")  # -0 vs +0
    b = a.astype(jnp.bfloat16)
    assert kernels._same_bits(b, b.at[3].set(3.0)).startswith("MISMATCH")
    assert kernels._same_bits(a, a[:3]).startswith("MISMATCH: shape")


def test_one_rounding_check():
    want = jnp.asarray([1.0, 100.0, 1e-6, -3.0], jnp.bfloat16)
    one_ulp = jnp.asarray([1.0078125, 100.5, 1e-6, -3.0], jnp.bfloat16)
    assert kernels._within_one_rounding(one_ulp, want) == "ok"
    assert kernels._within_one_rounding(want.at[1].set(102.0), want).startswith("MISMATCH")


def test_table_marks_failures():
    table = Table(lambda nbytes: [nbytes / 1e12])  # copies at 2000 GB/s
    table.add("device copy", "1 MiB", 2 << 20, [2e-6, 3e-6])
    table.add("reduce", "1 MiB", 3 << 20, [4e-6, 5e-6], [6e-6, 7e-6])
    assert not table.failed
    assert table.rows[1] == "| reduce | 1 MiB | 4.5 (4.0) | 699 | 35% | 1.44x | 6.5 (6.0) | ok |"
    table.add("combine", "1 MiB", 3 << 20, [4e-6], [6e-6], check="MISMATCH: 3 elements differ")
    assert table.failed


def _loop_copies(loop, *args):
    return kernels.loop_body_copies(loop.lower(*args).compile().as_text())


def test_xla_loops_time_the_math_alone():
    """XLA's side of the table is timed in a loop that feeds each call's result to the next:
    none of the benchmarked bodies may make XLA copy on every trip (it would be charged for it)."""
    import jax

    T, K, H = 16, 3, 24
    rows = jax.random.normal(jax.random.PRNGKey(0), (T * K, H)).astype(jnp.bfloat16)
    order = jax.random.permutation(jax.random.PRNGKey(1), T * K).astype(jnp.int32)
    weights = jnp.ones((T, K), jnp.float32)
    x = jnp.arange(1000, dtype=jnp.float32)
    cases = {
        "reduce float32": (kernels.reduce_math(jnp.float32), x, (x, x)),
        "reduce bfloat16": (kernels.reduce_math(jnp.bfloat16), x.astype(jnp.bfloat16), (x.astype(jnp.bfloat16),)),
        "combine": (kernels.combine_step(K), jnp.zeros((T, H), jnp.bfloat16), (rows, order.reshape(T, K), weights)),
        "gather": (kernels.gather_math, rows, (order,)),
    }
    for name, (body, carry, consts) in cases.items():
        assert _loop_copies(kernels.xla_loop(body, 3), carry, *consts) == [], name

    # The check sees the copy where there is one: a gather whose result replaces its input.
    naive = jax.jit(lambda c, o: jax.lax.fori_loop(0, 3, lambda i, c: kernels.gather_math(c, o), c))
    assert any(" copy(" in line for line in _loop_copies(naive, rows, order))


def test_xla_loop_calls_the_body_twice_per_trip():
    import jax

    out = kernels.xla_loop(lambda c, step: c + step, 3)(jnp.zeros(4), jnp.ones(4))
    np.testing.assert_array_equal(jax.device_get(out[0]), np.full(4, 6.0))
    np.testing.assert_array_equal(jax.device_get(out[1]), np.full(4, 5.0))


def test_copies_inside_fused_kernels_are_not_loop_copies():
    text = """HloModule m

%fused_transpose (p: f32[2,3]) -> f32[3,2] {
  %p = f32[2,3]{1,0} parameter(0)
  ROOT %copy.1 = f32[3,2]{0,1} copy(%p)
}

%body (c: f32[2,3]) -> f32[3,2] {
  %c = f32[2,3]{1,0} parameter(0)
  %t = f32[3,2]{0,1} fusion(%c), kind=kLoop, calls=%fused_transpose
  ROOT %copy.2 = f32[3,2]{1,0} copy(%t)
}

ENTRY %main (a: f32[2,3]) -> f32[2,3] {
  %a = f32[2,3]{1,0} parameter(0)
  ROOT %copy.3 = f32[2,3]{1,0} copy(%a)
}
"""
    assert kernels.loop_body_copies(text) == ["ROOT %copy.2 = f32[3,2]{1,0} copy(%t)"]


def test_xla_seconds_per_call():
    import jax

    rows = jax.random.normal(jax.random.PRNGKey(0), (64, 32)).astype(jnp.bfloat16)
    order = jax.random.permutation(jax.random.PRNGKey(1), 64).astype(jnp.int32)
    notes = []
    samples = kernels._xla_loop_seconds(kernels.gather_math, rows, (order,), 6, 3, notes, "gather")
    assert len(samples) == 3 and all(0 < s < 1 for s in samples)
    assert notes == []
