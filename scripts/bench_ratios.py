#!/usr/bin/env python3
"""Prints strata's benchmark times next to its baselines, from Google Benchmark JSON output.

Benchmark names are "<case>/<impl>[/threads:N][/real_time]" with impl in strata, eigen,
libtorch. With repetitions the medians are used, otherwise the single run. The libtorch column
is headed by the version strata_bench was built against (its context's libtorch_version).
A case only libtorch has is set against the strata case STAND_INS names.

    bench_ratios.py build-bench/bench.json
"""
import json
import sys

IMPLS = ("strata", "eigen", "libtorch")
# block_step_sdpa is libtorch's block with its fused attention (PyTorch 2); strata has no fused attention,
# so its row sets strata's block_step against it.
STAND_INS = {"block_step_sdpa": "block_step"}
TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def split_name(run_name):
    """(case, impl) of a benchmark name, or None when it names no known impl."""
    parts = [p for p in run_name.split("/") if p != "real_time"]
    impls = [p for p in parts if p in IMPLS]
    if len(impls) != 1:
        return None
    parts.remove(impls[0])
    return "/".join(parts), impls[0]


def load_times(path):
    """({case: {impl: real time in ns}}, libtorch version), medians preferred over single runs."""
    with open(path) as f:
        report = json.load(f)
    benchmarks = report["benchmarks"]
    times, from_median = {}, set()
    for b in benchmarks:
        if b.get("error_occurred"):
            continue
        is_median = b.get("run_type") == "aggregate" and b.get("aggregate_name") == "median"
        if b.get("run_type") == "aggregate" and not is_median:
            continue
        key = split_name(b.get("run_name", b["name"]))
        if key is None:
            continue
        case, impl = key
        if (case, impl) in from_median and not is_median:
            continue
        times.setdefault(case, {})[impl] = b["real_time"] * TO_NS[b.get("time_unit", "ns")]
        if is_median:
            from_median.add((case, impl))
    for case, t in times.items():
        base, _, threads = case.partition("/")
        if "strata" not in t and base in STAND_INS:
            stand_in = times.get("/".join(filter(None, (STAND_INS[base], threads))), {}).get("strata")
            if stand_in is not None:
                t["strata"] = stand_in
    return times, report.get("context", {}).get("libtorch_version")


def fmt_time(ns):
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def fmt_ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else "-"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    times, torch_version = load_times(sys.argv[1])
    torch = f"libtorch {torch_version}" if torch_version else "libtorch"
    header = ("case", "strata", "eigen", torch, "strata/eigen", f"strata/{torch}")
    rows = []
    for case, t in times.items():
        s = t.get("strata")
        rows.append((case, fmt_time(s), fmt_time(t.get("eigen")), fmt_time(t.get("libtorch")),
                     fmt_ratio(s, t.get("eigen")), fmt_ratio(s, t.get("libtorch"))))
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    print("median real time per iteration (ratio < 1: strata is faster)")
    print(line(header))
    print(line(tuple("-" * w for w in widths)))
    for r in rows:
        print(line(r))


if __name__ == "__main__":
    main()
