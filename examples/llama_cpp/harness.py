"""The comparison harness: every prompt of a file or folder, every method,
RUNS runs each; prints one markdown table with the median tokens/s of each
method per prompt, its speedup over plain decoding, target calls per token
and tree nodes per call, and the median over the prompts. A speedup is the
median over runs of the method's tokens/s over plain decoding's in the same
run (specdec_llama_compare decodes plainly first and, with the default
methods, once more after its model-free methods; llama.cpp's programs run
right after it): the machine's speed drifts between runs (plain decoding
ranged 93-129 tokens/s over three runs of one prompt on a 2-core VM), and a
ratio of medians taken from different runs carried that drift. With both
plain runs, a run's plain speed is their geometric mean (the speed around
the methods between them), and the two plain rows' own ratios show the
drift within the run.

  python3 harness.py --compare BIN --llama-build DIR --model GGUF --prompts PATH
                     [--runs 3] [-n 128] [--temp 0] [-t 1] [--depth 6] [--methods LIST] [--out DIR]
                     [--format F32|F16|Q8_0|Q4_0] [--repack 0|1] [--warm FILE] [--from-logs]

Methods: plain decoding and specdec's (from specdec_llama_compare --methods),
llama.cpp's llama-lookup and llama-speculative (draft model = target), all
on the same model file, threads, length, temperature, flash attention off and
weight repacking off (-nr; --repack 1 turns it on for every program). At a
temperature above 0 every program ignores end-of-generation tokens
(--ignore-eos): the methods sample different texts,
and one that stopped early would be timed on a shorter context. The warm
planned methods (planned-lookup-warm, planned-suffix-warm; not run unless
listed) have their planner decode --warm first, untimed, as an engine's
planner would after an earlier request. The default --warm is the shipped
prompt.txt, which is not in prompts/."""
import argparse
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_stats  # noqa: E402


def specdec_rows(text):
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 9 or cells[0] in ("method", "---") or not cells[1].isdigit():
            continue
        rows[cells[0]] = {"tps": float(cells[2]), "calls_per_token": float(cells[6]), "nodes": float(cells[7]),
                          "same": cells[-1]}
    return rows


def llama_row(path):
    _, s = llama_stats.stats(path)
    if s["n_predict"] is None or s["n_accept"] is None or not s["speed"]:
        return None
    calls = s["n_predict"] - s["n_accept"]
    return {"tps": s["speed"], "calls_per_token": calls / s["n_predict"],
            "nodes": (s["n_drafted"] or 0) / calls + 1, "same": "-"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compare", required=True)
    ap.add_argument("--llama-build", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--temp", default="0")
    ap.add_argument("-t", type=int, default=1)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--methods", default="lookup,suffix,planned-lookup,planned-suffix,plain-again")
    ap.add_argument("--warm", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "prompt.txt"),
                    help="the prompt the warm planned methods' planners decode first (untimed)")
    ap.add_argument("--out", default="/tmp/specdec-harness")
    ap.add_argument("--format", help="F32, F16, Q8_0 or Q4_0: every program runs a copy of --model in that format")
    ap.add_argument("--repack", type=int, choices=(0, 1), default=0,
                    help="llama.cpp's weight repacking (extra buffer types) for every program; 0: off (-nr)")
    ap.add_argument("--from-logs", action="store_true", help="run nothing: the table from the logs in --out")
    a = ap.parse_args()
    if a.format:  # the compare program makes the copy (llama.cpp's quantizer) and prints its path
        out = subprocess.run([a.compare, "-m", a.model, "--format", a.format, "-p", "x", "-n", "1", "--no-curve",
                              "--methods", "none"], capture_output=True, text=True, check=True)
        a.model = re.search(r"model copy \(\S+\): (\S+)", out.stdout).group(1)
    prompts = ([os.path.join(a.prompts, f) for f in sorted(os.listdir(a.prompts)) if f.endswith(".txt")]
               if os.path.isdir(a.prompts) else [a.prompts])
    os.makedirs(a.out, exist_ok=True)
    sampled = float(a.temp) > 0
    warm = ["--warm", a.warm] if "-warm" in a.methods else []
    common = ["-m", a.model, "-n", str(a.n), "--temp", a.temp, "-t", str(a.t), "-fa", "off", "-c", "4096", "-s", "1",
              "--spec-draft-n-max", str(a.depth)]
    common += (["-nr"] if a.repack == 0 else []) + (["--ignore-eos"] if sampled else [])
    table = {}  # prompt -> method -> run index -> row
    order = []
    for p in prompts:
        name = os.path.basename(p).removesuffix(".txt")
        for r in range(a.runs):
            runs = table.setdefault(name, {})
            log = os.path.join(a.out, f"{name}.{r}.specdec.txt")
            if not a.from_logs:
                out = subprocess.run([a.compare, "-m", a.model, "-f", p, "-n", str(a.n), "--temp", a.temp, "-t",
                                      str(a.t), "--depth", str(a.depth), "--methods", a.methods,
                                      "--repack", str(a.repack)] + warm + (["--ignore-eos"] if sampled else []),
                                     capture_output=True, text=True)
                open(log, "w").write(out.stdout + out.stderr)
            for m, row in (specdec_rows(open(log).read()) if os.path.exists(log) else {}).items():
                runs.setdefault(m, {})[r] = row
                if m not in order:
                    order.append(m)
            for prog, extra in (("llama-lookup", []), ("llama-speculative", ["-md", a.model])):
                log = os.path.join(a.out, f"{name}.{r}.{prog}.txt")
                if not a.from_logs:
                    with open(log, "w") as f:
                        subprocess.run([os.path.join(a.llama_build, "bin", prog), "-f", p] + common + extra,
                                       stdout=f, stderr=subprocess.STDOUT)
                row = llama_row(log) if os.path.exists(log) else None
                m = "llama.cpp " + prog
                if row:
                    runs.setdefault(m, {})[r] = row
                if m not in order:
                    order.append(m)
            print(f"done {name} run {r + 1}/{a.runs}", file=sys.stderr, flush=True)
    print(f"\nmedian of {a.runs} runs, n {a.n}, temperature {a.temp}, threads {a.t}, depth {a.depth}, "
          f"repacking {'on' if a.repack else 'off'}\n")
    print("| prompt | " + " | ".join(order) + " |")
    print("|---|" + "---|" * len(order))
    speedups = {m: [] for m in order}
    for name, runs in table.items():
        first_plain, again = runs.get("plain decoding", {}), runs.get("plain decoding, again", {})
        plain = {r: {"tps": (row["tps"] * again[r]["tps"]) ** 0.5 if r in again else row["tps"]}
                 for r, row in first_plain.items()}
        cells = []
        for m in order:
            rs = runs.get(m)
            if not rs:
                cells.append("failed")
                continue
            tps = statistics.median(row["tps"] for row in rs.values())
            paired = [row["tps"] / plain[r]["tps"] for r, row in rs.items() if r in plain and plain[r]["tps"] > 0]
            sp = statistics.median(paired) if paired else 0
            speedups[m].append(sp)
            first = rs[min(rs)]
            same = "" if first["same"] in ("yes", "-", "n/a (T>0)") else " (text differs)"
            cells.append(f"{tps:.1f} ({sp:.2f}x; {first['calls_per_token']:.2f} calls/tok, "
                         f"{first['nodes']:.1f} nodes/call){same}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("| median speedup | " + " | ".join(
        f"{statistics.median(speedups[m]):.2f}x" if speedups[m] else "-" for m in order) + " |")


if __name__ == "__main__":
    main()
