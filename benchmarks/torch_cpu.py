#!/usr/bin/env python3
"""strata_bench's cases in eager PyTorch on the CPU, as Google Benchmark JSON for scripts/bench_ratios.py.

    torch_cpu.py --out FILE [--filter REGEX] [--reps R] [--min-time S]

The cases, sizes and steps are bench_torch.cpp's (benchmarks/bench_common.h has the sizes, torch_models.py
the models), named "<case>/pytorch[/threads:N]/real_time" so that bench_ratios.py sets them beside strata's:
per-op overhead (add, add_requires_grad, add_sum_backward), mlp_step, matmul_1024, lstm_step, lenet_step,
resnet_block_step, conv2d_3x3_64_56, block_step (block_step_sdpa with F.scaled_dot_product_attention) and
adamw_step (bench_strata.cpp's; adamw_step_fused with fused=True), at 1 and 2 threads where the C++ side has both. This is the yardstick where the wheel's C++ library
cannot be built (scripts/bench), and beside it what a Python user pays per op. --filter selects cases
as Google Benchmark's --benchmark_filter does (re.search on the name). Method: per case a warm-up, then R
repetitions, each of back-to-back calls for at least S seconds (default 0.5, Google Benchmark's default);
the median of the repetitions' seconds per call is reported.
"""
import argparse
import json
import math
import re
import statistics
import time
from functools import partial

import torch
import torch.nn.functional as F

import torch_models

LR = 0.01
CASES = []


def case(name, threads=(None,)):
    """Registers fn() -> op as one case per thread count; op() is one timed iteration."""

    def register(fn):
        for t in threads:
            CASES.append((name + "/pytorch" + (f"/threads:{t}" if t else "") + "/real_time", fn, t))
        return fn

    return register


def sgd_step(params):
    """One SGD step after backward, gradients set to none (bench_torch.cpp's sgd_step)."""
    with torch.no_grad():
        for p in params:
            p.sub_(p.grad, alpha=LR)
            p.grad = None


def training_step(params, loss_fn):
    def op():
        loss_fn().backward()
        sgd_step(params)

    return op


@case("add")
def add():
    a, b = torch.ones(1), torch.ones(1)
    return lambda: a + b


@case("add_requires_grad")
def add_requires_grad():
    a, b = torch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)
    return lambda: a + b


@case("add_sum_backward")
def add_sum_backward():
    a, b = torch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)
    return lambda: (a + b).sum().backward()


@case("mlp_step", threads=(1, 2))
def mlp_step():
    x, y = torch.randn(64, 784), torch.randint(10, (64,))
    sizes = [(784, 256), (256, 256), (256, 10)]
    weights = [(torch.randn(i, o) * 0.05).requires_grad_() for i, o in sizes]
    biases = [torch.zeros(o, requires_grad=True) for _, o in sizes]

    def loss():
        h = torch.relu(x.matmul(weights[0]) + biases[0])
        h = torch.relu(h.matmul(weights[1]) + biases[1])
        return F.cross_entropy(h.matmul(weights[2]) + biases[2], y)

    return training_step(weights + biases, loss)


@case("matmul_1024", threads=(1, 2))
def matmul_1024():
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    return lambda: a.matmul(b)


def model_step(build):
    """A case of one SGD step of the torch_models builder `build` on the CPU."""
    return lambda: training_step(*build("cpu"))


case("lstm_step", threads=(1, 2))(model_step(torch_models.lstm))
case("lenet_step", threads=(1, 2))(model_step(torch_models.lenet))
case("resnet_block_step", threads=(1, 2))(model_step(torch_models.resnet_block))
case("conv2d_3x3_64_56", threads=(1, 2))(lambda: torch_models.conv2d_3x3("cpu"))
case("block_step", threads=(1, 2))(model_step(partial(torch_models.block_step, 256, 4, False, 16, 128)))
case("block_step_sdpa", threads=(1, 2))(model_step(partial(torch_models.block_step, 256, 4, True, 16, 128)))


def adamw_step(fused):
    """One AdamW step (weight decay 0.1) over examples/char_gpt's parameters (bench_common.h's
    char_gpt_param_shapes): PyTorch's default on the CPU, a loop over parameters, or fused=True."""
    V, C, T = 80, 128, 64
    shapes = [(V, C), (T, C)]
    for _ in range(4):
        shapes += [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,), (4 * C, C), (4 * C,), (C, 4 * C), (C,)]
    shapes += [(C,), (C,)]
    params = [torch.randn(s, requires_grad=True) for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1, fused=fused)
    return opt.step


case("adamw_step", threads=(1, 2))(partial(adamw_step, False))
case("adamw_step_fused", threads=(1, 2))(partial(adamw_step, True))


def row_kernel_step(x, grad, loss_of):
    """Forward plus backward of loss_of(x) with the gradient `grad`, x's gradient reset (bench_strata.cpp's (j))."""

    def op():
        loss_of(x).backward(grad)
        x.grad = None

    return op


@case("layer_norm_fwd_bwd", threads=(1, 2))
def layer_norm_fwd_bwd():
    w, b = torch.randn(128, requires_grad=True), torch.randn(128, requires_grad=True)
    x = torch.randn(16, 64, 128, requires_grad=True)
    return row_kernel_step(x, torch.randn(16, 64, 128), lambda x: torch.nn.functional.layer_norm(x, (128,), w, b))


@case("softmax_fwd_bwd", threads=(1, 2))
def softmax_fwd_bwd():
    x = torch.randn(16, 4, 64, 64, requires_grad=True)
    return row_kernel_step(x, torch.randn(16, 4, 64, 64), lambda x: torch.softmax(x, -1))


@case("cross_entropy_fwd_bwd", threads=(1, 2))
def cross_entropy_fwd_bwd():
    target = torch.randint(0, 4096, (1024,))
    x = torch.randn(1024, 4096, requires_grad=True)
    return row_kernel_step(x, None, lambda x: torch.nn.functional.cross_entropy(x, target))


def seconds_per_call(op, reps, min_time):
    """The median over reps repetitions of seconds per call, each repetition at least min_time seconds."""
    for _ in range(3):
        op()
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < min_time / 10:
        op()
        calls += 1
    per_rep = max(1, math.ceil(calls / (time.perf_counter() - start) * min_time))
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(per_rep):
            op()
        times.append((time.perf_counter() - start) / per_rep)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--filter", default=".", help="a regex, as Google Benchmark's --benchmark_filter")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.5)
    args = parser.parse_args()
    if args.reps < 1 or args.min_time <= 0:
        parser.error("--reps must be at least 1 and --min-time positive")
    results, default_threads = [], torch.get_num_threads()
    for name, make, threads in CASES:
        if not re.search(args.filter, name):
            continue
        torch.set_num_threads(threads or default_threads)
        torch.manual_seed(0)
        seconds = seconds_per_call(make(), args.reps, args.min_time)
        print(f"{name:48s} {seconds * 1e6:12.2f} us", flush=True)
        results.append({"name": name + "_median", "run_name": name, "run_type": "aggregate",
                        "aggregate_name": "median", "real_time": seconds * 1e9, "time_unit": "ns"})
    with open(args.out, "w") as f:
        json.dump({"context": {"pytorch_version": torch.__version__.split("+")[0]}, "benchmarks": results}, f, indent=1)


if __name__ == "__main__":
    main()
