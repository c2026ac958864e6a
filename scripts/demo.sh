#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build the examples
# (Release) and decode with the shipped trained models (examples/models)
# through specdec: one table for autoregressive, chain and tree speculative
# decoding at temperature 0 and 1, for a transformer and a Mamba2 hybrid.
# The older n-gram example stays as a quick check:
#   ./build/demo/examples/speculative_demo
# Usage: bash scripts/demo.sh [tokens per run, default 160] [repeats, default 3]
#        [matrix products: auto (bf16 where the CPU has AVX512-BF16), f32 or bf16]
#        [seed of the rows' order, default a new one every run (printed)]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --workflow --preset demo
./build/demo/examples/model_demo examples/models "${1:-160}" "${2:-3}" "${3:-auto}" ${4:+"$4"}
