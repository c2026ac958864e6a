#!/usr/bin/env bash
# The GPU suite in one command, for a machine with an NVIDIA GPU and no
# network: build the GPU targets for the native architecture, run the GPU
# equality tests, the GPU benchmarks, the NCCL shard executor on one rank,
# compute-sanitizer (memcheck, racecheck, synccheck) over the tests, the
# Python package's tests against the machine's torch, and a PyTorch
# verification baseline; print one markdown report (device, commands,
# results) for benchmarks/results/.
#
# Usage: bash benchmarks/run_gpu.sh [report.md]
# The whole suite ran 509 s on an H200 on 2026-11-30 (build 65 s, benchmarks 196 s,
# compute-sanitizer 160 s, Python 103 s).
# Environment:
#   SPECDEC_GPU_BUILD=dir      build folder (default build/gpu; full logs in dir/logs)
#   SPECDEC_GPU_SKIP_BUILD=1   use the programs already in the build folder
#   SPECDEC_GPU_STEPS="..."    steps to run (default: build tests bench nccl memcheck racecheck
#                              synccheck python torch-baseline)
#   SPECDEC_GPU_BENCH_ARGS="..." extra arguments for every benchmark program (split on
#                              spaces, no quotes inside), e.g. --benchmark_filter=R:1/ for a
#                              short slot (the full bench_gpu_verify sweep took 133 s on
#                              an H200 on 2026-11-30); a filter applies to bench_gpu_cache and _ssm too
#   CMAKE_PREFIX_PATH          where Catch2 and Google Benchmark are, if not installed
#                              (a copy of the Debian packages' files travels fine; binaries
#                              built on another machine did not start on the device machine,
#                              so build there: about 70 s on 16 cores)
# Every step runs under a time limit and the report says how each ended; the
# exit status is the first failing step's.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
out="${1:-/dev/stdout}"
build="${SPECDEC_GPU_BUILD:-build/gpu}"
steps="${SPECDEC_GPU_STEPS:-build tests bench nccl memcheck racecheck synccheck python torch-baseline}"
log="$build/logs"
mkdir -p "$log"
status=0
rep="$log/report.md"
[ "$out" != /dev/stdout ] && rep="$out" # written as it goes: a cut-off run still reports
report() { echo "$@" >>"$rep"; }
: >"$rep"

# step NAME SECONDS CMD...: run CMD under a time limit, log it, note the end.
step() {
  local name=$1 limit=$2 t0 rc took
  shift 2
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$log/$name.log" 2>&1
  rc=$?
  took=$(($(date +%s) - t0))
  echo $rc >"$log/$name.rc"
  if [ $rc -eq 0 ]; then
    report "- \`$name\`: ok in ${took} s"
  elif [ $rc -eq 124 ]; then
    report "- \`$name\`: **timed out** after ${took} s (limit ${limit} s)"
  else
    report "- \`$name\`: **failed** (exit $rc) in ${took} s"
  fi
  [ $rc -ne 0 ] && [ $status -eq 0 ] && status=$rc
  return $rc
}
# per_case TOOL PROGRAM: compute-sanitizer's TOOL over each Catch2 test case of PROGRAM.
per_case() {
  local rc=0 t s
  while IFS= read -r t; do
    echo "### $t"
    # Catch2's test spec: a backslash makes , [ ] * ~ " \ plain characters.
    compute-sanitizer --tool "$1" --error-exitcode 9 "$2" "$(sed 's/[][,*~"\\]/\\&/g' <<<"$t")" 2>&1 | tail -25
    s=${PIPESTATUS[0]}
    echo "rc=$s"
    [ "$s" = 0 ] || rc=1
  done < <("$2" --list-test-names-only | grep -v -e '^$' -e '^specdec_gpu_tests on ')
  return $rc
}
export -f per_case
want() { [[ " $steps " == *" $1 "* ]]; }
fence() { report '```'; "$@" >>"$rep" 2>&1; report '```'; }

report "# GPU run $(date -u '+%Y-%m-%d %H:%M UTC')"
report ""
report "Device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
report "Toolchain: $(nvcc --version | tail -1); $(c++ --version | head -1); $(cmake --version | head -1)"
report "Command: \`bash benchmarks/run_gpu.sh\` (steps: $steps)"
report ""
report "## Steps"

bench_targets=$(cd benchmarks && ls bench_gpu_*.cpp | sed 's/\.cpp$//' | tr '\n' ' ')
if want build && [ -z "${SPECDEC_GPU_SKIP_BUILD:-}" ]; then
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  step configure 120 cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_BENCHMARKS=ON \
    -DSPECDEC_PACKAGING_TESTS=OFF -DSPECDEC_HEADER_CHECK=OFF -DSPECDEC_BUILD_EXAMPLES=OFF \
    -DSPECDEC_CUDA_ARCHITECTURES=native -DCMAKE_CUDA_ARCHITECTURES=native &&
    { nccl=$(cmake --build "$build" --target help | grep -o 'specdec_parallel_nccl_tests' | head -1)
      step build 600 cmake --build "$build" -j "$(nproc)" --target specdec_gpu_tests $nccl $bench_targets; }
  if [ $status -ne 0 ]; then
    fence bash -c "grep -E -B2 -A8 'error|Error' '$log/configure.log' '$log/build.log' 2>/dev/null | head -80"
  fi
fi

gpu_tests="$build/tests/gpu/specdec_gpu_tests"
if want tests && [ -x "$gpu_tests" ]; then
  step tests 300 "$gpu_tests"
  fence tail -4 "$log/tests.log"
  grep -q FAILED "$log/tests.log" && fence bash -c "grep -E -B3 -A12 'FAILED' '$log/tests.log' | head -150"
fi
if want bench; then
  for b in $bench_targets; do
    [ -x "$build/benchmarks/$b" ] || continue
    # shellcheck disable=SC2086 # the extra arguments split on spaces
    step "$b" 240 "$build/benchmarks/$b" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
      ${SPECDEC_GPU_BENCH_ARGS:-}
    report ""
    report "### $b"
    fence grep -E 'median|Run on|^-{8}|^Benchmark' "$log/$b.log"
  done
fi

# The Python package builds (its own copy of the kernels, for the machine's
# torch) while compute-sanitizer runs, after the timings.
py_ok=
if want python && python3 -c 'import torch, nanobind, scikit_build_core' 2>/dev/null; then
  py_ok=1
  site="$build/python-site"
  rm -rf "$site"
  step python-build 400 python3 -m pip install --no-build-isolation --no-deps --no-index --target "$site" \
    -C cmake.define.SPECDEC_PYTHON_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES=native \
    -C cmake.define.SPECDEC_CUDA_ARCHITECTURES=native -C build-dir="$build/python-build" . &
  py_build=$!
elif want python; then
  report "- \`python\`: skipped (python3 lacks torch, nanobind or scikit-build-core)"
fi

nccl_tests="$build/tests/parallel/specdec_parallel_nccl_tests"
if want nccl && [ -x "$nccl_tests" ]; then
  step nccl 120 "$nccl_tests"
  fence tail -5 "$log/nccl.log"
elif want nccl; then
  report "- \`nccl\`: not built (nccl.h or libnccl not found)"
fi

# memcheck over the whole program; racecheck and synccheck one test case
# per process, so that one case's sticky CUDA error cannot fail the others.
if command -v compute-sanitizer >/dev/null && [ -x "$gpu_tests" ]; then
  if want memcheck; then
    step memcheck 240 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$gpu_tests"
    fence bash -c "grep -E 'ERROR SUMMARY|test cases' '$log/memcheck.log' | tail -2"
  fi
  for tool in racecheck synccheck; do
    want $tool || continue
    step "$tool" 300 bash -c 'per_case "$@"' _ "$tool" "$gpu_tests"
    fence bash -c "grep -c '^rc=0' '$log/$tool.log' | sed 's/^/cases clean: /'; grep -B30 '^rc=[1-9]' '$log/$tool.log' | grep -E '^###|SUMMARY|rror|rc=' | head -60"
  done
fi

if [ -n "$py_ok" ]; then
  wait "$py_build"
  [ "$(cat "$log/python-build.rc")" = 0 ] || status=1
  [ "$(cat "$log/python-build.rc")" = 0 ] &&
    step python-tests 300 env PYTHONPATH="$PWD/$site" python3 -m pytest -q -p no:cacheprovider python/tests
  fence bash -c "tail -3 '$log/python-build.log'; tail -15 '$log/python-tests.log' 2>/dev/null"
fi

# The peer baseline: vLLM's verification rule written in PyTorch, on
# bench_gpu_verify's shapes (needs only torch).
if want torch-baseline && python3 -c 'import torch' 2>/dev/null; then
  step torch-baseline 300 python3 python/benchmarks/bench_torch_verify.py
  report ""
  report "### PyTorch baseline (python/benchmarks/bench_torch_verify.py)"
  report ""
  grep -E '^\||^device' "$log/torch-baseline.log" >>"$rep"
fi

[ "$out" = /dev/stdout ] && cat "$rep"
exit "$status"
