#!/usr/bin/env python3
"""Fits tree_scan_choose's host cost model (ssm/tree_scan.hpp) to a crossover sweep.

    bench_ssm --benchmark_filter=BM_ssm_cross --benchmark_repetitions=3 \
        --benchmark_report_aggregates_only=true --benchmark_format=json > cross.json
    python3 benchmarks/fit_scan_cost.py cross.json [more.json ...]

Per form, time = sum of coefficient x work term (the terms of
tree_scan_cost), fitted by least squares on relative errors (weights 1/t^2)
with every coefficient kept >= 0; with several files, each configuration's
fastest median counts. Prints the coefficients, then for every configuration
both times, the form the fitted model picks and whether it is the faster
one, and how often each set shipped in ssm/tree_scan.hpp (32- and 16-byte
host vectors) picks it. Python
standard library only.
"""
import json
import os
import re
import sys

HEADER = os.path.join(os.path.dirname(__file__), "..", "include", "specdec", "ssm", "tree_scan.hpp")

HEADS, GROUPS = 8, 1  # the sweep's (benchmarks/bench_ssm.cpp, run_cross)


def pairs_of(n, chain):
    if chain:
        return n * (n + 1) // 2
    total = 0  # full binary tree in heap order: depth of node i is floor(log2(i + 1))
    for i in range(n):
        total += (i + 1).bit_length()
    return total


def load(paths):
    """Each configuration's fastest time over the files: a file's medians
    when it has aggregates (--benchmark_repetitions), else its runs."""
    best = {}
    for path in paths:
        entries = json.load(open(path))["benchmarks"]
        medians = any(b.get("aggregate_name") == "median" for b in entries)
        for b in entries:
            if medians and b.get("aggregate_name") != "median":
                continue
            if not medians and b.get("run_type") == "aggregate":
                continue
            m = re.match(r"BM_ssm_cross_(recurrent|dual)/nodes:(\d+)/headdim:(\d+)/dstate:(\d+)/chain:(\d+)", b["name"])
            if not m:
                continue
            key = (m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)))
            t = b["cpu_time"] * {"ns": 1.0, "us": 1e3, "ms": 1e6}[b["time_unit"]]
            best[key] = min(best.get(key, t), t)
    return best


def terms(form, n, p, s, chain):
    nh = n * HEADS
    if form == "recurrent":
        return [nh, nh * p, nh * p * s]
    pr = pairs_of(n, chain)
    return [nh, nh * p, nh * p * s, pr * HEADS * p, pr * GROUPS * s]


def solve(a, b):
    """Gaussian elimination with partial pivoting (small dense systems)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        piv = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[piv] = m[piv], m[c]
        for r in range(n):
            if r != c and m[c][c] != 0:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] if m[i][i] != 0 else 0.0 for i in range(n)]


def fit(rows):
    """Non-negative weighted least squares by dropping negative coefficients."""
    k = len(rows[0][0])
    active = list(range(k))
    while True:
        ata = [[0.0] * len(active) for _ in active]
        atb = [0.0] * len(active)
        for x, t in rows:
            w = 1.0 / (t * t)
            for i, ai in enumerate(active):
                atb[i] += w * x[ai] * t
                for j, aj in enumerate(active):
                    ata[i][j] += w * x[ai] * x[aj]
        sol = solve(ata, atb)
        if all(v >= 0 for v in sol):
            coef = [0.0] * k
            for i, ai in enumerate(active):
                coef[ai] = sol[i]
            return coef
        active.pop(min(range(len(sol)), key=lambda i: sol[i]))


def main():
    data = load(sys.argv[1:])
    coefs = {}
    for form in ("recurrent", "dual"):
        rows = [(terms(form, *k[1:]), t) for k, t in data.items() if k[0] == form]
        coefs[form] = fit(rows)
    names = {"recurrent": ["rec_node", "rec_row", "rec_entry"],
             "dual": ["dual_node", "dual_row", "dual_h0_entry", "dual_pair_row", "dual_pair_state"]}
    for form, c in coefs.items():
        print(form + ": " + ", ".join(f"{n} = {v:.4g}" for n, v in zip(names[form], c)))
    text = open(HEADER).read()
    # The shipped sets: `double name = detail::scan_cost_wide ? wide : narrow;`
    sets = {}
    for which in (1, 2):
        sets[which] = {f: [float(re.search(rf"double {n} = detail::scan_cost_wide \? ([0-9.e-]+) : ([0-9.e-]+);",
                                           text).group(which)) for n in names[f]] for f in names}
    right = total = 0
    shipped_right = {1: 0, 2: 0}
    print("\n| N | headdim x dstate | shape | recurrent us | dual us | model picks | right |")
    print("|---|---|---|---|---|---|---|")
    for k in sorted(k for k in data if k[0] == "recurrent"):
        _, n, p, s, chain = k
        dk = ("dual", n, p, s, chain)
        if dk not in data:
            continue
        tr, td = data[k], data[dk]
        er = sum(c * x for c, x in zip(coefs["recurrent"], terms("recurrent", n, p, s, chain)))
        ed = sum(c * x for c, x in zip(coefs["dual"], terms("dual", n, p, s, chain)))
        pick = "recurrent" if er <= ed else "dual"
        ok = (pick == "recurrent") == (tr <= td)
        right += ok
        total += 1
        for which, shipped in sets.items():
            sr = sum(c * x for c, x in zip(shipped["recurrent"], terms("recurrent", n, p, s, chain)))
            sd = sum(c * x for c, x in zip(shipped["dual"], terms("dual", n, p, s, chain)))
            shipped_right[which] += (sr <= sd) == (tr <= td)
        print(f"| {n} | {p} x {s} | {'chain' if chain else 'binary'} | {tr / 1e3:.1f} | {td / 1e3:.1f} | {pick} | "
              f"{'yes' if ok else 'no (' + format(abs(tr - td) / min(tr, td), '.0%') + ')'} |")
    print(f"\nthe fitted model picks the faster form in {right}/{total} configurations; the shipped "
          f"32-byte set in {shipped_right[1]}/{total}, the 16-byte set in {shipped_right[2]}/{total}")


if __name__ == "__main__":
    main()
