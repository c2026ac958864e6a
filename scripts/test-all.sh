#!/usr/bin/env bash
# Runs every check CI runs: dependencies, formatting, the API reference, the
# docs check (scripts/check_docs.py), the ci configuration
# (build with -Werror, all kernels for sm_80/sm_90, every header alone,
# packaging, and the host tests whose statistical trials are cut under
# sanitizers: verify, loop, parallel), the ASan+UBSan configuration (every
# host test), clang-tidy, and the Python package (pip install . then pytest).
# Usage: bash scripts/test-all.sh        (from anywhere; ~43 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
jobs="${SPECDEC_JOBS:-2}"
step() { printf '\n==== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

step "dependencies"
bash scripts/install-deps.sh

step "clang-format"
mapfile -t sources < <(git ls-files '*.hpp' '*.cuh' '*.cpp' '*.cu')
clang-format --dry-run --Werror "${sources[@]}"
echo "clang-format: ${#sources[@]} files clean"

step "API reference (Doxygen, warnings are errors)"
# Every public entity must carry a //! comment; output in build/doxygen/html.
mkdir -p build
doxygen docs/Doxyfile
echo "doxygen: build/doxygen/html/index.html"

step "docs check (every documented file and name exists)"
# README, CHANGELOG and docs/*.md: repository paths, headers, links and the
# specdec names they call must exist (scripts/check_docs.py, stdlib only).
python3 scripts/check_docs.py

step "ci configuration: build"
cmake --preset ci >/dev/null
cmake --build --preset ci -j "$jobs"

step "ci configuration: tests"
ctest --preset ci -j "$jobs"

step "sanitize configuration (ASan + UBSan)"
cmake --preset sanitize >/dev/null
cmake --build --preset sanitize -j "$jobs"
ctest --preset sanitize -j "$jobs"

step "clang-tidy (every public header, through the header-check sources)"
mapfile -t tus < <(ls build/ci/tests/headers/*.cpp)
if ! printf '%s\n' "${tus[@]}" | xargs -P "$jobs" -n 8 clang-tidy -p build/ci --quiet --warnings-as-errors='*' \
    --extra-arg=-DSPECDEC_HEADER_ALONE \
    >build/ci/clang-tidy.log 2>&1; then
  grep -v 'warnings generated' build/ci/clang-tidy.log
  exit 1
fi
echo "clang-tidy: ${#tus[@]} headers clean"

step "python package: pip install . and pytest (with the CUDA kernels when nvcc is found)"
# A venv of its own; numpy, pytest, nanobind and scikit-build-core from PyPI.
# No build isolation, so the wheel build reuses build/python between runs.
py=build/venv-python/bin/python
[ -x "$py" ] || python3 -m venv build/venv-python
"$py" -m pip install -q --upgrade numpy pytest nanobind scikit-build-core
# The ci build compiled every kernel for sm_80 and sm_90: PTX for one
# virtual architecture is enough to check that the bindings build against
# them (and runs on any GPU from sm_80, JIT-compiled by the driver).
"$py" -m pip install -q --no-build-isolation -C cmake.define.SPECDEC_WERROR=ON \
  -C cmake.define.SPECDEC_CUDA_ARCHITECTURES=80-virtual .
(cd python/tests && "../../$py" -m pytest -q)

step "all checks passed"
