#!/usr/bin/env bash
# The one GPU check, for a lent GPU machine, in under 5 minutes: builds jax_jaccl with its CUDA
# extension as a user's machine would (the machine's own default compiler: CC/CXX are left as
# they are), runs `jaccl-bench kernels`, then the whole GPU suite in parallel (pytest -n 4) with
# JACCL_DEBUG=INFO, plus the symbol-table and machine-code (SASS) checks on the modules just
# built. Writes a one-screen summary to $OUT/summary.md (default ./gpu_out) with every log
# beside it, and prints it. The first test that died of a signal is run once more with its
# processes under cuda-gdb, whose C++ backtraces go into the summary. Budget: build 50-56 s
# (2026-12-04), benchmark <= 90 s (~24 s seen), tests <= 150 s (67-100 s seen), backtrace
# <= 45 s; with the machine's start, one run took 3.5-4 minutes of device time.
#
# Usage: OUT=<dir> bash tests/cuda/run_on_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-./gpu_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export JACCL_DEBUG=INFO XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$OUT/steps.log"; }

stamp "machine"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $PY -c "import jax; print('jax', jax.__version__, jax.devices())"
  echo "CC=${CC:-} CXX=${CXX:-}"
  "${CXX:-c++}" --version | head -1
  command -v nvcc >/dev/null && nvcc --version | tail -1
} > "$OUT/machine.log" 2>&1

stamp "build"
build_start=$(date +%s)
JACCL_CUDA=ON $PY -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1
echo "$? $(( $(date +%s) - build_start ))" > "$OUT/build.status"
stamp "build: exit $(cut -d' ' -f1 "$OUT/build.status")"

if [ "$(cut -d' ' -f1 "$OUT/build.status")" = 0 ]; then
  stamp "kernels benchmark"
  timeout 90 $PY -m jax_jaccl.bench.cli kernels > "$OUT/kernels.md" 2> "$OUT/kernels.log"
  stamp "kernels: exit $?"

  parallel=()
  $PY -c "import xdist" 2>/dev/null && parallel=(-n 4)
  stamp "tests ${parallel[*]}"
  timeout 150 $PY -m pytest "${parallel[@]}" -rA -p no:cacheprovider --timeout 140 \
    --junitxml="$OUT/junit.xml" tests/cuda tests/in_process/test_symbols.py tests/builds/test_kernel_machine_code.py \
    > "$OUT/tests.log" 2>&1
  stamp "tests: exit $?"

  # The first test whose processes died of a signal, once more, each process under cuda-gdb.
  crashed=$($PY tests/support/gpu_run_summary.py --crashed "$OUT" | head -1)
  if [ -n "$crashed" ]; then
    stamp "backtrace of $crashed"
    JACCL_TEST_WORKER_PREFIX="cuda-gdb -batch -ex run -ex bt --args" timeout 45 \
      cuda-gdb -batch -ex run -ex bt --args $PY -m pytest -p no:xdist -p no:cacheprovider -x -q \
      "$crashed" > "$OUT/backtrace.log" 2>&1
  fi
fi

stamp "done"
$PY tests/support/gpu_run_summary.py "$OUT" > "$OUT/summary.md"
cat "$OUT/summary.md"
