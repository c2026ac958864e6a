#!/usr/bin/env python3
"""Markdown tables from bench_ssm JSON output (benchmarks/results/ssm_*.md).

    bench_ssm --benchmark_filter='BM_ssm_[a-z_0-9]+/nodes' --benchmark_repetitions=5 \
        --benchmark_report_aggregates_only=true --benchmark_format=json > run.json
    python3 benchmarks/ssm_table.py run.json [label] [other.json label ...]

Per form and tree shape: median CPU time per call, FLOP/s, FLOP/s as a
fraction of the same run's GEMM (BM_ssm_gemm at the same N) and t(N)/t(1).
"""
import json
import re
import sys

FORMS = ["gemm", "recurrent", "recurrent_states", "dual", "auto", "dual_eigen", "commit", "conv1d", "check"]


def load(path):
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        m = re.match(r"BM_ssm_([a-z_0-9]+)/nodes:(\d+)/heads:(\d+)/chain:(\d+)", b["name"])
        if not m or m.group(1) not in FORMS:
            continue
        out[(m.group(1), int(m.group(4)), int(m.group(2)))] = (b["cpu_time"], b.get("FLOP/s", 0.0))
    return out


def table(data, label):
    ns = sorted({k[2] for k in data})
    print(f"\n### {label}\n")
    for shape in (0, 1):
        print(f"\n{'full binary tree' if shape == 0 else 'chain'}: time per call (us) / GFLOP/s / "
              f"fraction of the same-run GEMM's FLOP/s / t(N)/t(1)\n")
        print("| form | " + " | ".join(f"N={n}" for n in ns) + " |")
        print("|---|" + "---|" * len(ns))
        for form in FORMS:
            cells = []
            for n in ns:
                if (form, shape, n) not in data:
                    cells.append("")
                    continue
                t, f = data[(form, shape, n)]
                g = data.get(("gemm", shape, n), (0, 0))[1]
                t1 = data.get((form, shape, 1), (0, 0))[0]
                frac = f"{f / g:.2f}" if g and f else "-"
                ratio = f"{t / t1:.1f}" if t1 else "-"
                gf = f"{f * 1e-9:.1f}" if f else "-"
                cells.append(f"{t:.1f} / {gf} / {frac} / {ratio}")
            print(f"| {form} | " + " | ".join(cells) + " |")


def main():
    args = sys.argv[1:]
    pairs = [(args[i], args[i + 1] if i + 1 < len(args) else args[i]) for i in range(0, len(args), 2)]
    for path, label in pairs:
        table(load(path), label)


if __name__ == "__main__":
    main()
