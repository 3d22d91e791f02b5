#!/usr/bin/env python3
"""Per-kernel GPU time of a benchmark step, from Nsight Compute (strata) or torch.profiler (PyTorch), as one table.

    python3 scripts/gpu_kernels.py --title "strata block" --steps 5 --ncu ncu-block.csv
    python3 scripts/gpu_kernels.py --title "torch block" --steps 5 --tsv torch-block.tsv

--ncu reads `ncu --metrics gpu__time_duration.sum --csv --page raw` output (the program's own lines may be
mixed in); --tsv reads lines `launches<TAB>microseconds<TAB>kernel` (torch_cuda.py --profile-out). Both are
totals over --steps steps; the table gives microseconds and launches per step, largest first, and the
total, so strata's and PyTorch's tables of the same step can be laid side by side.
"""

import argparse
import csv
import sys
from collections import defaultdict

UNIT_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def read_ncu(path):
    """{kernel: [launches, microseconds]} from ncu's raw CSV page."""
    totals = defaultdict(lambda: [0, 0.0])
    header = units = None
    with open(path, errors="replace") as f:
        for row in csv.reader(line for line in f if line.startswith('"')):
            if header is None:
                if "Kernel Name" in row and "gpu__time_duration.sum" in row:
                    header = row
                continue
            if units is None:
                units = row
                continue
            if len(row) != len(header):
                continue
            name = row[header.index("Kernel Name")]
            column = header.index("gpu__time_duration.sum")
            value = float(row[column].replace(",", ""))
            totals[name][0] += 1
            totals[name][1] += value * UNIT_US.get(units[column], 1e-3)
    if header is None:
        sys.exit(f"gpu_kernels.py: no ncu table with gpu__time_duration.sum in {path}")
    return totals


def read_tsv(path):
    totals = {}
    with open(path) as f:
        for line in f:
            launches, micros, name = line.rstrip("\n").split("\t", 2)
            totals[name] = [int(launches), float(micros)]
    return totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--title", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--rows", type=int, default=25)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--ncu")
    source.add_argument("--tsv")
    args = parser.parse_args()
    totals = read_ncu(args.ncu) if args.ncu else read_tsv(args.tsv)
    rows = sorted(totals.items(), key=lambda kv: -kv[1][1])
    all_us = sum(us for _, us in totals.values()) / args.steps
    all_launches = sum(n for n, _ in totals.values()) / args.steps
    print(f"== {args.title}: {all_us / 1e3:.3f} ms of kernels and {all_launches:.0f} launches per step "
          f"({args.steps} steps)")
    print(f"{'us/step':>9} {'launches':>8} {'share':>6}  kernel")
    for name, (launches, us) in rows[: args.rows]:
        short = name if len(name) <= 120 else name[:117] + "..."
        print(f"{us / args.steps:9.1f} {launches / args.steps:8.1f} {100 * us / args.steps / all_us:5.1f}%  {short}")


if __name__ == "__main__":
    main()
