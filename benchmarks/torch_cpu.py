#!/usr/bin/env python3
"""strata_bench's cases in eager PyTorch on the CPU, as Google Benchmark JSON for scripts/bench_ratios.py.

    torch_cpu.py --out FILE [--filter REGEX] [--reps R] [--min-time S]

The cases, sizes and steps are bench_torch.cpp's (benchmarks/bench_common.h has the sizes), named
"<case>/pytorch[/threads:N]/real_time" so that bench_ratios.py sets them beside strata's: per-op overhead
(add, add_requires_grad, add_sum_backward), mlp_step, matmul_1024, lstm_step, lenet_step,
resnet_block_step, conv2d_3x3_64_56 and block_step (block_step_sdpa with F.scaled_dot_product_attention),
at 1 and 2 threads where bench_torch.cpp has both. This is the yardstick where the wheel's C++ library
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

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_cuda import Block

LR = 0.01
CASES = []


def case(name, threads=(None,)):
    """Registers fn(threads) -> op as one case per thread count; op() is one timed iteration."""

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
def add(_):
    a, b = torch.ones(1), torch.ones(1)
    return lambda: a + b


@case("add_requires_grad")
def add_requires_grad(_):
    a, b = torch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)
    return lambda: a + b


@case("add_sum_backward")
def add_sum_backward(_):
    a, b = torch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)
    return lambda: (a + b).sum().backward()


@case("mlp_step", threads=(1, 2))
def mlp_step(_):
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
def matmul_1024(_):
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    return lambda: a.matmul(b)


@case("lstm_step", threads=(1, 2))
def lstm_step(_):
    lstm = nn.LSTM(256, 256, num_layers=2)
    x, target = torch.randn(64, 32, 256), torch.randn(64, 32, 256)
    return training_step(list(lstm.parameters()), lambda: F.mse_loss(lstm(x)[0], target))


@case("lenet_step", threads=(1, 2))
def lenet_step(_):
    conv1, conv2, fc1, fc2 = nn.Conv2d(1, 10, 5), nn.Conv2d(10, 20, 5), nn.Linear(320, 50), nn.Linear(50, 10)
    x, y = torch.randn(64, 1, 28, 28), torch.randint(10, (64,))

    def loss():
        h = torch.relu(F.max_pool2d(conv1(x), 2))
        h = torch.relu(F.max_pool2d(conv2(h), 2))
        h = torch.relu(fc1(h.view(-1, 320)))
        return F.nll_loss(F.log_softmax(fc2(h), 1), y)

    return training_step([p for m in (conv1, conv2, fc1, fc2) for p in m.parameters()], loss)


@case("resnet_block_step", threads=(1, 2))
def resnet_block_step(_):
    conv1, conv2 = (nn.Conv2d(64, 64, 3, padding=1, bias=False) for _ in range(2))
    bn1, bn2 = nn.BatchNorm2d(64), nn.BatchNorm2d(64)
    x, target = torch.randn(32, 64, 32, 32), torch.randn(32, 64, 32, 32)

    def loss():
        h = torch.relu(bn1(conv1(x)))
        return F.mse_loss(torch.relu(bn2(conv2(h)) + x), target)

    return training_step([p for m in (conv1, conv2, bn1, bn2) for p in m.parameters()], loss)


@case("conv2d_3x3_64_56", threads=(1, 2))
def conv2d_3x3(_):
    x = torch.randn(8, 64, 56, 56, requires_grad=True)
    w = (torch.randn(64, 64, 3, 3) * 0.05).requires_grad_()
    grad = torch.randn(8, 64, 56, 56)

    def op():
        F.conv2d(x, w, padding=1).backward(grad)
        x.grad, w.grad = None, None

    return op


def block_step(fused):
    block = Block(256, 4, fused)
    x, target = torch.randn(16, 128, 256), torch.randn(16, 128, 256)
    return training_step(list(block.parameters()), lambda: F.mse_loss(block(x), target))


case("block_step", threads=(1, 2))(lambda _: block_step(False))
case("block_step_sdpa", threads=(1, 2))(lambda _: block_step(True))


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
        seconds = seconds_per_call(make(threads), args.reps, args.min_time)
        print(f"{name:48s} {seconds * 1e6:12.2f} us", flush=True)
        results.append({"name": name + "_median", "run_name": name, "run_type": "aggregate",
                        "aggregate_name": "median", "real_time": seconds * 1e9, "time_unit": "ns"})
    with open(args.out, "w") as f:
        json.dump({"context": {"pytorch_version": torch.__version__.split("+")[0]}, "benchmarks": results}, f, indent=1)


if __name__ == "__main__":
    main()
