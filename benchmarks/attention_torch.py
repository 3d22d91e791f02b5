#!/usr/bin/env python3
"""F.scaled_dot_product_attention's forward and backward in eager PyTorch at one sequence length, as
strata_bench_attention measures strata's (same shapes, defaults and output), one T per process.

    attention_torch.py [--t T] [--batch B] [--heads H] [--dim D] [--causal 0|1] [--reps R] [--threads N]
                       [--backward 0|1]

Prints `torch T=<T> ms=<median> peak_mib=<VmHWM - VmRSS before the first step>`.
"""
import argparse
import time

import torch
import torch.nn.functional as F


def status_mib(name):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(name + ":"):
                return float(line.split()[1]) / 1024.0
    raise RuntimeError("no " + name + " in /proc/self/status")


def main():
    p = argparse.ArgumentParser()
    for name, default in (("t", 1024), ("batch", 8), ("heads", 8), ("dim", 64), ("causal", 1), ("reps", 3),
                          ("threads", 1), ("backward", 1)):
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    shape = (a.batch, a.heads, a.t, a.dim)
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape)
    base = status_mib("VmRSS")
    times = []
    for rep in range(a.reps + 1):
        start = time.perf_counter()
        y = F.scaled_dot_product_attention(q, k, v, is_causal=bool(a.causal))
        if a.backward:
            y.backward(grad)
        if rep > 0:
            times.append(1e3 * (time.perf_counter() - start))
    times.sort()
    mid = len(times) // 2
    median = times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2
    print(f"torch T={a.t} ms={median:.3f} peak_mib={status_mib('VmHWM') - base:.1f}")


if __name__ == "__main__":
    main()
