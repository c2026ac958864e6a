"""The ratio of a Python-driven round to the same round in C++ on the real
models of examples/model_demo.cpp.

round_real_cpp.cpp (compiled here with g++ -O2) decodes with the demo's
transformer target and drafter GGUFs (an i.i.d. 3,2,2,1 tree at T = 1 and a
top-2 depth-4 tree at T = 0), dumps every round's tree, target rows (and
draft rows), cache length and the target's paged KV pool shape and block
table, then times the specdec part of each round in C++. This script replays
the same rounds through the Python package on numpy arrays, preallocated as
an engine would (outputs and caches reused between rounds):

  mask    specdec.positions + specdec.packed_mask (64-bit words)
  verify  specdec.verify_tree
  commit  specdec.keep_indices + specdec.commit_kv (K and V, paged "SLTHD")

Per stage: the median over `reps` repetitions of each round, averaged over
the rounds (both sides the same way). Both must accept the same number of
drafts. Usage: python python/benchmarks/bench_real_round.py [tokens] [reps]
"""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import specdec

REPO = Path(__file__).resolve().parents[2]


def build_cpp(out: Path) -> None:
    cxx = os.environ.get("CXX", "g++")
    subprocess.run([cxx, "-std=c++20", "-O2", "-DNDEBUG", "-I", str(REPO / "include"), "-I", str(REPO / "examples"),
                    "-I", "/usr/include/eigen3", str(Path(__file__).with_name("round_real_cpp.cpp")), "-o",
                    str(out)], check=True)


def read_dump(path: Path):
    b = path.read_bytes()
    at = 0

    def take(dtype, count):
        nonlocal at
        a = np.frombuffer(b, dtype=dtype, count=count, offset=at)
        at += a.nbytes
        return a

    R, V, pages, layers, page, heads, hdim = (int(v) for v in take(np.int64, 7))
    table = take(np.int32, pages).copy()
    rounds = []
    for _ in range(R):
        n, mode = (int(v) for v in take(np.int64, 2))
        seed = int(take(np.uint64, 1)[0])
        rnd, cache_len, has_q = (int(v) for v in take(np.int64, 3))
        parent = take(np.int32, n).copy()
        tokens = take(np.int32, n).copy()
        p = take(np.float32, n * V).reshape(n, V).copy()
        q = take(np.float32, n * V).reshape(n, V).copy() if has_q else None
        rounds.append(dict(n=n, mode=mode, seed=seed, round=rnd, cache_len=cache_len, parent=parent, tokens=tokens,
                           p=p, q=q))
    return V, (pages, layers, page, heads, hdim), table, rounds


def main() -> None:
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    with tempfile.TemporaryDirectory() as tmp:
        exe, dump = Path(tmp) / "round_real_cpp", Path(tmp) / "rounds.bin"
        build_cpp(exe)
        out = subprocess.run([str(exe), str(REPO / "examples" / "models"), str(dump), str(tokens), str(reps)],
                             check=True, capture_output=True, text=True).stdout
        cpp = {ln.split()[1]: float(ln.split()[2]) for ln in out.splitlines() if ln.startswith("cpp ")}
        V, shape, table, rounds = read_dump(dump)

    k = np.zeros(shape, dtype=np.float32)  # [pages, layers, page, kv heads, head dim]
    v = np.zeros(shape, dtype=np.float32)
    bt = table.reshape(1, -1)
    maxn = max(r["n"] for r in rounds)
    pos = np.empty(maxn, np.int64)
    mask = np.empty((maxn, (maxn + 63) // 64), np.uint64)
    path = np.empty(maxn, np.int32)
    emitted = np.empty(maxn, np.int32)
    keep = np.empty(maxn, np.int64)
    stages = {"mask": 0.0, "verify": 0.0, "commit": 0.0, "total": 0.0}
    accepted = 0
    ns = time.perf_counter_ns
    for r in rounds:
        n, parent, cl = r["n"], r["parent"], r["cache_len"]
        posn, maskn = pos[:n], mask[:n, :(n + 63) // 64]
        tm, tv, tc, tt = [], [], [], []
        res = None
        for _ in range(reps):
            t0 = ns()
            specdec.positions(parent, cl, out=posn)
            specdec.packed_mask(parent, out=maskn)
            t1 = ns()
            res = specdec.verify_tree(parent, r["tokens"], r["p"], r["q"], mode=r["mode"], seed=r["seed"],
                                      round=r["round"], path=path, tokens_out=emitted)
            t2 = ns()
            kept = specdec.keep_indices(parent, res.path, cl, out=keep)
            specdec.commit_kv([k, v], "SLTHD", cl, kept, block_table=bt)
            t3 = ns()
            tm.append(t1 - t0)
            tv.append(t2 - t1)
            tc.append(t3 - t2)
            tt.append(t3 - t0)
        accepted += res.accepted
        for key, t in (("mask", tm), ("verify", tv), ("commit", tc), ("total", tt)):
            stages[key] += float(np.median(t)) / 1e3
    R = len(rounds)
    if accepted != int(cpp["accepted"]):
        raise SystemExit(f"accepted drafts differ: Python {accepted}, C++ {int(cpp['accepted'])}")
    print(f"{R} real rounds (tokens per config {tokens}, reps {reps}), V = {V}, KV pool {list(shape)}; "
          f"accepted drafts {accepted} on both sides")
    print(f"{'stage':8s} {'Python us':>10s} {'C++ us':>8s} {'ratio':>6s}")
    for key in ("mask", "verify", "commit", "total"):
        py = stages[key] / R
        print(f"{key:8s} {py:10.2f} {cpp[key]:8.2f} {py / cpp[key]:5.1f}x")


if __name__ == "__main__":
    main()
