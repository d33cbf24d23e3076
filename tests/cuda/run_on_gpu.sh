#!/usr/bin/env bash
# The one thing to run on a lent GPU machine (about 15 minutes of GPU time, start included):
# builds jax_jaccl with its CUDA extension against the machine's own Python, jax and CUDA,
# runs the kernel benchmark (short, and wanted even if a test goes wrong), then the GPU tests
# (most important first, each with its own timeout), and writes every log to $OUT
# (default ./gpu_out). `run_on_gpu.sh quick` runs only the build, the benchmark and the
# in-process and two-process peer-path batteries.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-./gpu_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$OUT/steps.log"; }

stamp "machine"
{ nvidia-smi; nvidia-smi -q | grep -i -A2 "compute mode"; $PY -c "import jax; print(jax.__version__, jax.devices())"; } \
  > "$OUT/machine.log" 2>&1
stamp "build"
JACCL_CUDA=ON $PY -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 \
  || { stamp "build failed (see build.log)"; tail -40 "$OUT/build.log"; exit 1; }
$PY -c "import jax_jaccl._ext as e; print('platforms', e.PLATFORMS)" >> "$OUT/machine.log" 2>&1

stamp "kernels benchmark"
timeout 240 $PY -m jax_jaccl.bench.cli kernels > "$OUT/kernels.md" 2> "$OUT/kernels.log"
stamp "kernels: exit $?"

tests=(tests/cuda/test_gpu.py)
[ "${1:-}" = quick ] && tests=(tests/cuda/test_gpu.py -k "this_process or peer-1")
stamp "tests ${tests[*]}"
JACCL_DEBUG=INFO timeout 900 $PY -m pytest -v -rs --timeout 300 -p no:cacheprovider --durations=0 \
  "${tests[@]}" > "$OUT/tests.log" 2>&1
stamp "tests: exit $?"
tail -30 "$OUT/tests.log"
cat "$OUT/kernels.md"
