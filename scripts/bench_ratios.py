#!/usr/bin/env python3
"""Prints strata's benchmark times next to its baselines, from Google Benchmark JSON output.

Benchmark names are "<case>/<impl>[/threads:N][/real_time]" with impl in strata, eigen,
libtorch (strata_bench) and pytorch (benchmarks/torch_cpu.py, eager Python); the reports of several
files are merged. With repetitions the medians are used, otherwise the single run. The libtorch and
PyTorch columns are headed by their versions (the contexts' libtorch_version and pytorch_version);
the PyTorch column is shown when a report has it. A case only the baselines have is set against the
strata case STAND_INS names.

    bench_ratios.py build-bench/bench.json [build-bench/bench-pytorch.json]
"""
import json
import sys

IMPLS = ("strata", "eigen", "libtorch", "pytorch")
# block_step_sdpa is PyTorch's block with its fused attention (PyTorch 2); strata's one block always runs its
# fused attention, so its row sets strata's block_step against it.
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


def load_times(paths):
    """({case: {impl: real time in ns}}, {context key: value}) of the reports, medians preferred over single runs."""
    times, from_median, context = {}, set(), {}
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        context.update(report.get("context", {}))
        for b in report["benchmarks"]:
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
    return times, context


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
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    times, context = load_times(sys.argv[1:])
    labels = {"eigen": "eigen", "libtorch": " ".join(filter(None, ("libtorch", context.get("libtorch_version"))))}
    if any("pytorch" in t for t in times.values()):
        labels["pytorch"] = " ".join(filter(None, ("PyTorch", context.get("pytorch_version"), "eager")))
    header = ("case", "strata", *labels.values(), *(f"strata/{label}" for label in labels.values()))
    rows = []
    for case, t in times.items():
        s = t.get("strata")
        rows.append((case, fmt_time(s), *(fmt_time(t.get(impl)) for impl in labels),
                     *(fmt_ratio(s, t.get(impl)) for impl in labels)))
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    print("median real time per iteration (ratio < 1: strata is faster)")
    print(line(header))
    print(line(tuple("-" * w for w in widths)))
    for r in rows:
        print(line(r))


if __name__ == "__main__":
    main()
