#!/usr/bin/env python3
"""PyTorch eager on the GPU, measured as benchmarks/bench_cuda.cpp measures strata, line for line:

  matmul      n x n x n products in float32, TF32 (torch.backends.cuda.matmul.allow_tf32) and bfloat16,
              n = 4096 and 8192, in TFLOP/s (2 n^3 per product);
  mlp_step    one SGD step (zero_grad, forward, cross entropy, backward, update) of a 784-4096-4096-10
              ReLU MLP on a batch of 512, float32, in ms;
  block_step  one AdamW step of a nanoGPT Block (pre-norm, causal self-attention written out as strata's
              nn::TransformerBlock computes it, GELU MLP; B 16, T 256, C 768, 12 heads; MSE against a random
              target), float32, in ms. block_step_sdpa is the same block with
              F.scaled_dot_product_attention, for reference (strata has no fused attention);
  models      the CPU benchmarks' small models, float32, in ms: conv2d_3x3 (forward and backward of a 3x3
              convolution, 64 channels, 56 x 56, batch 8) and one SGD step each of lenet_step (the MNIST CNN,
              batch 64), resnet_block_step (a basic block with batch norm, 64 channels, 32 x 32, batch 32, MSE)
              and lstm_step (2 layers, 256 wide, 64 steps, batch 32, MSE), with cuDNN as PyTorch uses it.
The models are torch_models.py's, which torch_cpu.py shares.

One line per measurement, e.g. `matmul dtype=bf16 n=8192 tflops=612.30`.

    python3 benchmarks/torch_cuda.py [--reps R] [--part all|matmul|mlp|block|models] [--profile-steps N --profile-out PREFIX]

Method (the device tool's METHOD.md): random inputs, never zeros; a warm-up; R timed batches, each a run
of back-to-back operations between two torch.cuda.Event records, sized to take about 50 ms; the median
batch time over its count. Products rotate among 4 input pairs so that repeats miss the L2 cache.
"""

import argparse
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_models

TARGET_BATCH_SECONDS = 0.05


# --profile-steps N --profile-out PREFIX: before timing mlp_step and block_step(_sdpa), record N steps
# under torch.profiler and write their kernels to PREFIX-<name>.tsv for scripts/gpu_kernels.py.
PROFILE = {"steps": 0, "prefix": None}


def profile(op, name):
    """Launches and microseconds of each GPU kernel over PROFILE["steps"] calls of op, after a warm-up."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile as record

    for _ in range(3):
        op()
    torch.cuda.synchronize()
    with record(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(PROFILE["steps"]):
            op()
        torch.cuda.synchronize()
    totals = {}
    for event in prof.events():
        if event.device_type == DeviceType.CUDA:
            launches, micros = totals.get(event.name, (0, 0.0))
            totals[event.name] = (launches + 1, micros + event.time_range.elapsed_us())
    with open(f"{PROFILE['prefix']}-{name}.tsv", "w") as f:
        for kernel, (launches, micros) in totals.items():
            f.write(f"{launches}\t{micros}\t{kernel}\n")


def time_per_call(op, reps, name=None):
    """Seconds per call of op: warm-up, then reps event-timed batches of about 50 ms; the median."""
    if name and PROFILE["steps"]:
        profile(op, name)
    for _ in range(3):
        op()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    op()
    end.record()
    end.synchronize()
    once = start.elapsed_time(end) / 1e3
    per_batch = max(1, int(TARGET_BATCH_SECONDS / max(once, 1e-6)))
    batches = []
    for _ in range(reps):
        start.record()
        for _ in range(per_batch):
            op()
        end.record()
        end.synchronize()
        batches.append(start.elapsed_time(end) / 1e3 / per_batch)
    return statistics.median(batches)


def bench_matmul(reps):
    modes = [("f32", torch.float32, False), ("tf32", torch.float32, True), ("bf16", torch.bfloat16, False)]
    for n in (4096, 8192):
        for name, dtype, tf32 in modes:
            torch.manual_seed(n)
            a = [torch.randn(n, n, device="cuda").to(dtype) for _ in range(4)]
            b = [torch.randn(n, n, device="cuda").to(dtype) for _ in range(4)]
            saved = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = tf32
            state = {"next": 0}

            def op():
                i = state["next"]
                torch.matmul(a[i], b[i])
                state["next"] = (i + 1) % 4

            seconds = time_per_call(op, reps)
            torch.backends.cuda.matmul.allow_tf32 = saved
            print(f"matmul dtype={name} n={n} tflops={2.0 * n ** 3 / seconds / 1e12:.2f}", flush=True)
            del a, b


def report_step(line, optimizer, loss_fn, reps, name=None):
    """Prints line with the milliseconds of one training step: zero_grad, loss_fn().backward(), step."""

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn().backward()
        optimizer.step()

    print(f"{line} ms={time_per_call(step, reps, name) * 1e3:.3f}", flush=True)


def bench_mlp(reps):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                          nn.Linear(4096, 10)).cuda()
    sgd = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(512, 784, device="cuda")
    y = torch.randint(10, (512,), device="cuda")
    report_step("mlp_step dtype=f32 batch=512 sizes=784-4096-4096-10", sgd,
                lambda: F.cross_entropy(model(x), y), reps, "mlp_step")


def bench_block(reps):
    for fused, name in ((False, "block_step"), (True, "block_step_sdpa")):
        torch.manual_seed(0)
        params, loss = torch_models.block_step(768, 12, fused, 16, 256, "cuda")
        report_step(f"{name} dtype=f32 B=16 T=256 C=768 heads=12", torch.optim.AdamW(params, lr=3e-4), loss, reps,
                    name)


def bench_models(reps):
    torch.manual_seed(0)
    print(f"conv2d_3x3 dtype=f32 B=8 C=64 HW=56 ms={time_per_call(torch_models.conv2d_3x3('cuda'), reps) * 1e3:.3f}",
          flush=True)
    for line, build in (("lenet_step dtype=f32 batch=64", torch_models.lenet),
                        ("resnet_block_step dtype=f32 B=32 C=64 HW=32", torch_models.resnet_block),
                        ("lstm_step dtype=f32 T=64 B=32 hidden=256 layers=2", torch_models.lstm)):
        params, loss = build("cuda")
        report_step(line, torch.optim.SGD(params, lr=0.01), loss, reps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=15, help="timed batches per measurement")
    parser.add_argument("--part", choices=("all", "matmul", "mlp", "block", "models"), default="all")
    parser.add_argument("--profile-steps", type=int, default=0, help="steps to record per step measurement")
    parser.add_argument("--profile-out", help="prefix of the kernel tables --profile-steps writes")
    args = parser.parse_args()
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    if args.profile_steps and not args.profile_out:
        parser.error("--profile-steps needs --profile-out")
    PROFILE.update(steps=args.profile_steps, prefix=args.profile_out)
    if not torch.cuda.is_available():
        sys.exit("torch_cuda.py: no CUDA device is visible to PyTorch; nothing to measure")
    torch.backends.cuda.matmul.allow_tf32 = False  # PyTorch's default, and strata's
    if args.part in ("all", "matmul"):
        bench_matmul(args.reps)
    if args.part in ("all", "mlp"):
        bench_mlp(args.reps)
    if args.part in ("all", "block"):
        bench_block(args.reps)
    if args.part in ("all", "models"):
        bench_models(args.reps)


if __name__ == "__main__":
    main()
