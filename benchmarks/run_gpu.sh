#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build the kernels for its architecture,
# run the GPU equality tests and the GPU benchmarks, and print a report
# (device, command, results) for benchmarks/results/.
# Usage: bash benchmarks/run_gpu.sh [report.md]   (full logs in build/gpu/*.log)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
out="${1:-/dev/stdout}"
log=build/gpu
mkdir -p "$log"
if ! { cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_BENCHMARKS=ON -DSPECDEC_PACKAGING_TESTS=OFF \
  -DSPECDEC_HEADER_CHECK=OFF -DSPECDEC_CUDA_ARCHITECTURES=native -DCMAKE_CUDA_ARCHITECTURES=native &&
  cmake --build build/gpu -j "$(nproc)"; } >"$log/build.log" 2>&1; then
  grep -E -B2 -A8 'error|Error' "$log/build.log" | head -150
  echo "run_gpu: build failed (full log: $log/build.log)"
  exit 1
fi
status=0
{
  echo "# GPU run $(date -u +%Y-%m-%d)"
  echo
  echo "Device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"
  echo "Command: bash benchmarks/run_gpu.sh"
  echo
  echo '## specdec_gpu_tests'
  echo '```'
  ./build/gpu/tests/gpu/specdec_gpu_tests >"$log/gpu_tests.log" 2>&1 || status=$?
  tail -5 "$log/gpu_tests.log"
  echo '```'
  for b in build/gpu/benchmarks/bench_gpu_*; do
    echo "## $(basename "$b")"
    echo '```'
    "$b" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true 2>&1 | grep -E 'median|Run on|^-|Benchmark'
    echo '```'
  done
} | tee "$out"
if [ "$status" -ne 0 ]; then
  echo "run_gpu: GPU tests failed (exit $status); failures:"
  grep -E -A12 'FAILED|failed|REQUIRE|CHECK' "$log/gpu_tests.log" | head -200
fi
exit "$status"
