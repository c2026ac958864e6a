#!/usr/bin/env bash
# One command: fetch and build llama.cpp + SmolLM2 (cached), build the specdec
# example, then print plain decoding vs llama.cpp's llama-speculative and
# llama-lookup vs specdec chain/tree speculation on the same model, prompt
# and settings.
#
#   bash examples/llama_cpp/run.sh            # the comparison (temperature 0)
#   bash examples/llama_cpp/run.sh --test     # the CTest test of the adapter
#   N=256 TEMP=0.8 THREADS=2 DEPTH=6 PROMPT_FILE=... bash examples/llama_cpp/run.sh
#   bash examples/llama_cpp/run.sh --harness  # every prompt of PROMPTS (file or folder,
#                                               default examples/llama_cpp/prompts), RUNS=3 runs, medians
#   FORMAT=F16 bash examples/llama_cpp/run.sh  # every program on a copy of the model in another weight
#                                               format (F32, F16, Q8_0, Q4_0; made once by llama.cpp's
#                                               quantizer; docs/llama_cpp.md compares them)
#   REPACK=1 FORMAT=Q4_0 bash examples/llama_cpp/run.sh --harness  # llama.cpp's weight repacking on for
#                                               every program (llama.cpp's default; off here because it
#                                               crashed on AMX Xeons; on AVX2 it speeds up Q4_0 most;
#                                               docs/llama_cpp.md "Weight format")
#
# Environment: SPECDEC_LLAMA_CACHE (cache folder), SPECDEC_LLAMA_CUDA=1 (CUDA
# build of llama.cpp for sm_90; untested here), SPECDEC_JOBS (build jobs).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${SPECDEC_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specdec/llama_cpp}"
export SPECDEC_LLAMA_CACHE="$CACHE"
CUDA="${SPECDEC_LLAMA_CUDA:-0}"
JOBS="${SPECDEC_JOBS:-2}"
N="${N:-128}"
TEMP="${TEMP:-0}"
THREADS="${THREADS:-2}"
DEPTH="${DEPTH:-6}"
REPACK="${REPACK:-0}"
PROMPT_FILE="${PROMPT_FILE:-$HERE/prompt.txt}"
MODE="${1:-compare}"

bash "$HERE/fetch_build.sh"
# shellcheck disable=SC1091
source "$CACHE/paths.env"

if [[ "$CUDA" == 1 ]]; then
  EX_BUILD="$CACHE/build-example-cuda" CUDA_OPT=ON
else
  EX_BUILD="$CACHE/build-example" CUDA_OPT=OFF
fi
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
cmake -S "$HERE" -B "$EX_BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DSPECDEC_LLAMA_CACHE="$CACHE" \
  -DSPECDEC_LLAMA_CUDA="$CUDA_OPT" >/dev/null
cmake --build "$EX_BUILD" -j "$JOBS" --target specdec_llama_compare test_llama_adapter

MODEL="$SMOLLM2_GGUF"
if [[ -n "${FORMAT:-}" ]]; then
  MODEL="$("$EX_BUILD/specdec_llama_compare" -m "$SMOLLM2_GGUF" --format "$FORMAT" -p x -n 1 --no-curve \
    --methods none | sed -n 's/^model copy ([^)]*): //p')"
  [[ -n "$MODEL" ]] || { echo "could not make the $FORMAT copy" >&2; exit 1; }
fi

if [[ "$MODE" == "--test" ]]; then
  exec ctest --test-dir "$EX_BUILD" -R llama_cpp_adapter --output-on-failure
fi
if [[ "$MODE" == "--harness" ]]; then
  exec python3 "$HERE/harness.py" --compare "$EX_BUILD/specdec_llama_compare" --llama-build "$LLAMA_BUILD" \
    --model "$MODEL" --prompts "${PROMPTS:-$HERE/prompts}" --runs "${RUNS:-3}" -n "$N" --temp "$TEMP" \
    -t "$THREADS" --depth "$DEPTH" --repack "$REPACK" --out "$CACHE/last-harness"
fi

OUT="$CACHE/last-run"
mkdir -p "$OUT"
# llama.cpp's own programs, same model, prompt, length, sampling, threads,
# flash attention off, weight repacking off (-nr: llama.cpp's extra buffer
# types; the AMX path crashed on Intel Xeons for batches of more than one
# token, and specdec_llama_compare loads with it off too). llama-speculative
# drafts with the same model (the only GGUF at hand whose vocabulary
# matches); llama-lookup is its prompt lookup.
COMMON=(-m "$MODEL" -f "$PROMPT_FILE" -n "$N" --temp "$TEMP" -t "$THREADS" -fa off -c 4096 -s 1
  --spec-draft-n-max "$DEPTH")
[[ "$REPACK" == 1 ]] || COMMON+=(-nr)
echo "== llama.cpp llama-speculative (draft model = target)"
"$LLAMA_BUILD/bin/llama-speculative" "${COMMON[@]}" -md "$MODEL" >"$OUT/llama-speculative.txt" 2>&1 ||
  echo "llama-speculative failed (see $OUT/llama-speculative.txt)"
echo "== llama.cpp llama-lookup"
"$LLAMA_BUILD/bin/llama-lookup" "${COMMON[@]}" >"$OUT/llama-lookup.txt" 2>&1 ||
  echo "llama-lookup failed (see $OUT/llama-lookup.txt)"

echo "== specdec inside llama.cpp (plain, prompt lookup chain/tree, self-draft chain/tree)"
set +e
"$EX_BUILD/specdec_llama_compare" -m "$MODEL" -f "$PROMPT_FILE" -n "$N" --temp "$TEMP" -t "$THREADS" --depth "$DEPTH" \
  --repack "$REPACK" --plain-out "$OUT/plain.txt" | tee "$OUT/specdec.txt"
SPECDEC_RC=${PIPESTATUS[0]}
set -e

python3 "$HERE/llama_stats.py" "$OUT/plain.txt" "$TEMP" "$OUT/llama-speculative.txt" "$OUT/llama-lookup.txt"
echo "(logs in $OUT)"
exit "$SPECDEC_RC"
