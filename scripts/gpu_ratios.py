#!/usr/bin/env python3
"""Pairs strata_bench_cuda's lines with torch_cuda.py's and prints strata/torch for each measurement.

    python3 scripts/gpu_ratios.py bench-strata.txt bench-torch.txt

A line is `<name> <key>=<value> ... <metric>=<number>`; two lines pair when everything before the metric
is equal. The metric is tflops (higher is better) or ms (lower is better); the last column says which
side is ahead. Torch lines with no strata partner (block_step_sdpa, fused attention) are shown against
the strata line of the same measurement without the suffix, marked as a reference.
"""

import sys


def parse(path):
    """{(measurement, metric): value} in file order."""
    rows = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) < 2 or "=" not in fields[-1]:
                continue
            metric, value = fields[-1].split("=", 1)
            try:
                rows[(" ".join(fields[:-1]), metric)] = float(value)
            except ValueError:
                continue
    return rows


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    strata, torch = parse(sys.argv[1]), parse(sys.argv[2])
    table = []
    for (name, metric), theirs in torch.items():
        reference = ""
        ours = strata.get((name, metric))
        if ours is None:
            base = name.split()[0].rsplit("_", 1)[0] + " " + " ".join(name.split()[1:])
            ours = strata.get((base.strip(), metric))
            reference = " (reference: torch's fused attention)"
        if ours is None or theirs <= 0 or ours <= 0:
            table.append((name, metric, ours, theirs, "-", "no strata result" if ours is None else ""))
            continue
        ratio = ours / theirs
        faster = ratio > 1 if metric == "tflops" else ratio < 1
        table.append((name, metric, ours, theirs, f"{ratio:.2f}",
                      ("strata ahead" if faster else "torch ahead") + reference))
    for key in strata:
        if key not in torch:
            table.append((key[0], key[1], strata[key], None, "-", "no torch result"))
    width = max((len(row[0]) for row in table), default=10)
    print(f"{'measurement':<{width}}  {'metric':>6}  {'strata':>10}  {'torch':>10}  {'strata/torch':>12}")
    for name, metric, ours, theirs, ratio, note in table:
        fmt = lambda v: "-" if v is None else f"{v:.2f}"
        print(f"{name:<{width}}  {metric:>6}  {fmt(ours):>10}  {fmt(theirs):>10}  {ratio:>12}  {note}")


if __name__ == "__main__":
    main()
