#!/usr/bin/env python3
"""strata_bench_ddp's data-parallel step in eager PyTorch: torch.nn.parallel.DistributedDataParallel over gloo.

    mpirun -np 2 python ddp_torch.py [--steps S] [--reps R] [--port P]

The ranks come from Open MPI's environment (OMPI_COMM_WORLD_RANK and _SIZE) and meet on 127.0.0.1:P, so
`scripts/bench ddp` starts this as it starts strata_bench_ddp (with a free port). The model, batch and step
timing are strata_bench_ddp's: the 784-256-256-10 MLP, batch 128 per rank, SGD at 0.01, one thread per rank;
blocks of S steps, each timed on the slowest rank, interleaved R times, medians printed.
  step     zero_grad, forward, cross entropy, backward (DDP's bucketed all_reduces over gloo), SGD update;
  compute  the same step inside DDP's no_sync(), which skips DDP's reducer: its bucket copies as well as the
           all_reduces (strata_bench_ddp's compute step keeps its hooks and copies and skips only the
           communication).
overhead = step - compute is what DDP's synchronisation costs the step. Prints the same columns as strata_bench_ddp
where PyTorch has the quantity, and `step_ms=<value>` last for scripts/bench.
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BATCH_PER_RANK, IN, HIDDEN, CLASSES, LR = 128, 784, 256, 10, 0.01


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--port", type=int, default=29517)
    opt = parser.parse_args()
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{opt.port}", rank=rank, world_size=world)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, CLASSES))
    ddp = nn.parallel.DistributedDataParallel(model)
    sgd = torch.optim.SGD(model.parameters(), lr=LR)
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(BATCH_PER_RANK, IN, generator=gen)
    y = torch.randint(0, CLASSES, (BATCH_PER_RANK,), generator=gen)

    def step():
        sgd.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        sgd.step()

    def compute():
        with ddp.no_sync():
            step()

    def seconds_per_call(op):
        """Seconds per call of opt.steps back-to-back calls on the slowest rank; the ranks start together."""
        dist.barrier()
        start = time.perf_counter()
        for _ in range(opt.steps):
            op()
        elapsed = torch.tensor([(time.perf_counter() - start) / opt.steps], dtype=torch.float64)
        dist.all_reduce(elapsed, dist.ReduceOp.MAX)
        return elapsed.item()

    for _ in range(3):
        step()
    step_s, compute_s = [], []
    for _ in range(opt.reps):
        step_s.append(seconds_per_call(step))
        compute_s.append(seconds_per_call(compute))

    if rank == 0:
        t_step, t_compute = statistics.median(step_s), statistics.median(compute_s)
        print(f"PyTorch {torch.__version__} DDP (gloo) step, 784-256-256-10 MLP, batch {BATCH_PER_RANK} per rank, "
              f"SGD; medians of {opt.reps} blocks of {opt.steps} steps")
        print(f"{'ranks':>5} | {'step ms':>8} {'samples/s':>10} {'compute ms':>11} {'overhead ms':>12}")
        print(f"{world:>5} | {t_step * 1e3:8.3f} {world * BATCH_PER_RANK / t_step:10.0f} {t_compute * 1e3:11.3f} "
              f"{(t_step - t_compute) * 1e3:12.3f}")
        print(f"step_ms={t_step * 1e3:.4f}")
    # Rank 0 holds the TCP store: the others must be done with the group before it goes.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
