"""Per-call overhead of the binding and the Python/C++ ratio of one
synthetic round (see round_cpp.cpp for the round). Prints medians.

Usage: python python/benchmarks/bench_overhead.py   (needs g++ for the C++ side)
"""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import specdec
from specdec import _core

REPO = Path(__file__).resolve().parents[2]


def median_us(fn, reps=20000):
    for _ in range(200):
        fn()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn()
        t.append(time.perf_counter_ns() - t0)
    return float(np.median(t)) / 1e3


def overhead():
    parent = np.array([-1], dtype=np.int32)
    tokens = np.zeros(1, dtype=np.int32)
    p = np.array([[0.5, 0.5]], dtype=np.float32)
    path = np.zeros(1, dtype=np.int32)
    out = np.zeros(1, dtype=np.int32)
    pos = np.zeros(1, dtype=np.int64)
    greedy = _core.VerifyParams(mode=3)
    rows = {
        "empty call (nanobind floor: _core.verify_workspace_size)": lambda: _core.verify_workspace_size(2, 1),
        "_core.positions_i64, 1 node": lambda: _core.positions_i64(parent, 0, pos),
        "_core.verify_tree, 1 node, V=2 (outputs given)":
            lambda: _core.verify_tree(parent, tokens, p, None, greedy, None, path, out),
        "specdec.verify_tree, 1 node, V=2 (outputs given)":
            lambda: specdec.verify_tree(parent, tokens, p, mode=specdec.Mode.GREEDY, path=path, tokens_out=out),
        "specdec.verify_tree, 1 node, V=2 (outputs allocated)":
            lambda: specdec.verify_tree(parent, tokens, p, mode=specdec.Mode.GREEDY),
        "specdec.positions, 1 node (output allocated)": lambda: specdec.positions(parent, 0),
    }
    for name, fn in rows.items():
        print(f"  {name:58s} {median_us(fn):7.2f} us")


def synthetic_round():
    N, V, L, H, T, D, cache_len = 16, 4096, 4, 4, 512, 64, 100
    parent = np.array([-1] + [(i - 1) // 2 for i in range(1, N)], dtype=np.int32)
    tokens = np.array([(i * 37) % V for i in range(N)], dtype=np.int32)
    r_, v_ = np.arange(N)[:, None], np.arange(V)[None, :]
    p = (1 + (r_ * 131 + v_ * 71) % 97).astype(np.float32)
    p /= p.sum(1, keepdims=True, dtype=np.float32)
    q = (1 + (r_ * 53 + v_ * 29) % 89).astype(np.float32)
    q /= q.sum(1, keepdims=True, dtype=np.float32)
    kc = np.zeros((1, L, H, T, D), dtype=np.float16)
    vc = np.zeros_like(kc)
    mask = np.zeros((N, 1), dtype=np.uint64)
    pos = np.zeros(N, dtype=np.int64)
    path = np.zeros(N, dtype=np.int32)
    out = np.zeros(N, dtype=np.int32)
    keep = np.zeros(N, dtype=np.int64)
    state = {"round": 0, "acc": 0}

    def one():
        specdec.packed_mask(parent, out=mask)
        specdec.positions(parent, cache_len, out=pos)
        r = specdec.verify_tree(parent, tokens, p, q, seed=1, round=state["round"], path=path, tokens_out=out)
        k = specdec.keep_indices(parent, r.path, cache_len, out=keep)
        specdec.commit_kv([kc, vc], "SLHTD", cache_len, k)
        state["round"] += 1
        state["acc"] += r.accepted

    py = median_us(one, reps=3000)
    # Same Philox keys as the C++ loop (rounds 0..2999): the accepted lengths must agree exactly.
    state["round"], state["acc"] = 0, 0
    for _ in range(3000):
        one()
    with tempfile.TemporaryDirectory() as d:
        exe = Path(d) / "round_cpp"
        subprocess.run(["g++", "-std=c++20", "-O2", "-DNDEBUG", "-I", str(REPO / "include"),
                        str(Path(__file__).with_name("round_cpp.cpp")), "-o", str(exe)], check=True)
        cpp, cpp_acc = map(float, subprocess.run([str(exe)], capture_output=True, text=True,
                                                 check=True).stdout.split())
    print(f"  python round {py:8.2f} us   C++ round {cpp:8.2f} us   ratio {py / cpp:5.2f}x"
          f"   (mean accepted: python {state['acc'] / state['round']:.3f}, C++ {cpp_acc:.3f})")


if __name__ == "__main__":
    print(f"specdec {specdec.__file__} numpy {np.__version__} python {sys.version.split()[0]}")
    print("per-call overhead (median):")
    overhead()
    print("synthetic round (16-node binary tree, V=4096 sampled_iid, 2x[4,4,512,64] fp16 KV commit):")
    synthetic_round()
