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
