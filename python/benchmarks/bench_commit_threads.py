"""Host commit_kv through Python with threads=1, 2, ... (the call-owned
pool over kv_commit_executor) on a decode-sized batch, next to a same-run
memcpy of the moved bytes (numpy copy of one contiguous block of that
size) and the whole-cache stream rate. Prints medians.

Usage: python python/benchmarks/bench_commit_threads.py [threads ...]
"""
import sys
import time

import numpy as np

import specdec

R, L, H, T, D = 8, 16, 8, 1024, 128  # requests, layers, kv heads, capacity, head dim (fp16)
TREE, KEEP = 16, 6                     # tree nodes written past cache_len, nodes kept per request


def median_s(fn, reps):
    fn()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return float(np.median(t))


def main():
    threads = [int(a) for a in sys.argv[1:]] or [1, 2]
    rng = np.random.default_rng(1)
    caches = [rng.standard_normal((R, L, H, T, D)).astype(np.float16) for _ in range(2)]  # K and V
    cache_len = rng.integers(T // 2, T - TREE, size=R).astype(np.int64)
    keep = np.concatenate([c + np.sort(rng.choice(TREE, size=KEEP, replace=False)) for c in cache_len])
    ko = np.arange(R + 1, dtype=np.int32) * KEEP
    moved = 2 * R * L * H * KEEP * D * 2  # bytes copied (read once, written once); GB/s below = moved / time
    mb = sum(c.nbytes for c in caches) / 2**20
    print(f"caches: 2 x [{R}, {L}, {H}, {T}, {D}] fp16 ({mb:.0f} MiB), {R} requests keep {KEEP} of {TREE} "
          f"nodes: {moved / 2**20:.2f} MiB moved per call, {2 * R} (tensor, request) items")
    src = np.ones(moved, np.uint8)
    dst = np.empty_like(src)
    t = median_s(lambda: np.copyto(dst, src), 200)
    print(f"memcpy of the moved bytes (one block)  {t * 1e6:9.1f} us  {moved / t / 1e9:6.2f} GB/s")
    for n in threads:
        t = median_s(lambda: specdec.commit_kv(caches, "SLHTD", cache_len, keep, ko, threads=n), 200)
        print(f"commit_kv threads={n:<2}                    {t * 1e6:9.1f} us  {moved / t / 1e9:6.2f} GB/s")


if __name__ == "__main__":
    main()
