#!/usr/bin/env bash
# The one thing to run on a lent GPU machine (about 15 minutes of GPU time, start included):
# builds jax_jaccl with its CUDA extension against the machine's own Python, jax and CUDA,
# runs the GPU tests and the kernel benchmark, and writes every log to $OUT (default ./gpu_out).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-./gpu_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
{ nvidia-smi; $PY -c "import jax; print(jax.__version__, jax.devices())"; } > "$OUT/machine.log" 2>&1
JACCL_CUDA=ON $PY -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 \
  || { echo "build failed (see build.log)"; tail -40 "$OUT/build.log"; exit 1; }
$PY -c "import jax_jaccl._ext as e; print('platforms', e.PLATFORMS)" >> "$OUT/machine.log" 2>&1
if $PY -c "import pytest" 2>/dev/null; then
  timeout 900 $PY -m pytest -q tests/cuda > "$OUT/tests.log" 2>&1
else  # no pytest on the machine: the same checks as plain scripts
  { timeout 600 $PY tests/cuda/gpu_collectives.py
    XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 timeout 600 $PY -m jax_jaccl.launch -n 2 -- \
      $PY tests/cuda/gpu_collectives.py --worker; } > "$OUT/tests.log" 2>&1
fi
echo "tests: exit $?" >> "$OUT/tests.log"
timeout 600 $PY -m jax_jaccl.bench.cli kernels > "$OUT/kernels.md" 2> "$OUT/kernels.log"
echo "kernels: exit $?" >> "$OUT/kernels.log"
tail -5 "$OUT/tests.log"; cat "$OUT/kernels.md"
