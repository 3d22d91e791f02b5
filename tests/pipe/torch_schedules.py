#!/usr/bin/env python3
"""Writes the schedules of PyTorch's torch.distributed.pipelining as schedule files, as PyTorch itself writes them,
for strata's engine to train with (tests/distributed/test_pipe_engine.cpp, PipeEngine.RunsPyTorchsScheduleFiles).

    torch_schedules.py [--zbv-stages N] OUT_DIR MICRO_BATCHES STAGES...

For each number of stages S it writes OUT_DIR/<name>_S<S>.csv: the one-chunk schedules (Schedule1F1B,
ScheduleGPipe) in their compute-only form, a line of PipelineScheduleSingle.pipeline_order per rank as
PipelineScheduleMulti._dump_csv writes it, and the multi-chunk ones with PyTorch's own
_PipelineScheduleRuntime._dump_csv, transfers included (format "compute_comms"). Where PyTorch refuses the counts
(DualPipeV wants at least as many micro-batches as virtual stages) it writes OUT_DIR/<name>_S<S>.refused with its
message instead. Then the sweeps that PipeSchedules.*PyTorchs hold strata's schedules against:
ScheduleZBVZeroBubble for S = 2 to 16 stages and S to 4S micro-batches, and some shapes of 24 and 32 stages, as
OUT_DIR/zbv/S<S>_M<M>.csv (--zbv-stages 32 makes that every shape up to 32 stages, the whole of issue 31's claim:
about 1,500 files and 15 minutes here, too long for every test run); ScheduleInterleavedZeroBubble with 2 and 3 chunks per rank for S = 2 to 12 and S to 4S
micro-batches where it takes them, as OUT_DIR/interleaved_zb/S<S>_M<M>_v<chunks>.csv; ScheduleDualPipeV for S = 2
to 8 and 2S to 4S micro-batches, as OUT_DIR/dualpipev/S<S>_M<M>.csv. Last it writes OUT_DIR/layouts.txt, a line "<name> <chunks> <loop|v>" per schedule, so a directory
with that file is complete.

Schedules are built without processes: each rank's stages are stand-ins with the attributes a schedule reads.
"""
import csv
import os
import sys

import torch
from torch.distributed.pipelining import schedules

# name: (class, chunks per rank, whether the chunks sit in a V)
SCHEDULES = {
    "1f1b": (schedules.Schedule1F1B, 1, False),
    "gpipe": (schedules.ScheduleGPipe, 1, False),
    "interleaved_1f1b": (schedules.ScheduleInterleaved1F1B, 2, False),
    "interleaved_zero_bubble": (schedules.ScheduleInterleavedZeroBubble, 2, False),
    "zbv_zero_bubble": (schedules.ScheduleZBVZeroBubble, 2, True),
    "dualpipev": (schedules.ScheduleDualPipeV, 2, True),
}


class Stage:
    """What a schedule's constructor reads of a pipeline stage."""

    def __init__(self, index, num_stages, group_size, rank):
        self.stage_index = index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = rank
        self.is_first = index == 0
        self.is_last = index == num_stages - 1
        self.stage_index_to_group_rank = {}
        self.submod = torch.nn.Linear(1, 1)
        self.has_backward = True
        self.dw_builder = None


def make(cls, ranks, micro_batches, chunks, v_shape):
    num_stages = ranks * chunks
    indices = [0, 2 * ranks - 1] if v_shape else [c * ranks for c in range(chunks)]
    stages = [Stage(i, num_stages, ranks, 0) for i in indices]
    loss = lambda output, target: output  # noqa: E731: never called
    if chunks == 1:
        return cls(stages[0], n_microbatches=micro_batches, loss_fn=loss)
    return cls(stages, n_microbatches=micro_batches, loss_fn=loss)


def main():
    args = sys.argv[1:]
    zbv_stages = 16
    if args[:1] == ["--zbv-stages"] and len(args) > 1:
        zbv_stages, args = int(args[1]), args[2:]
    if len(args) < 3:
        sys.exit(__doc__)
    out, micro_batches, stage_counts = args[0], int(args[1]), [int(s) for s in args[2:]]
    os.makedirs(out, exist_ok=True)
    for name, (cls, chunks, v_shape) in SCHEDULES.items():
        for ranks in stage_counts:
            path = os.path.join(out, f"{name}_S{ranks}.csv")
            try:
                schedule = make(cls, ranks, micro_batches, chunks, v_shape)
            except ValueError as e:
                with open(path[: -len(".csv")] + ".refused", "w") as f:
                    f.write(f"{e}\n")
                continue
            if chunks == 1:
                with open(path, "w", newline="") as f:
                    csv.writer(f).writerows(schedule.pipeline_order[r] for r in range(ranks))
            else:
                schedule._dump_csv(path, format="compute_comms")
    zbv = [(s, m, 2) for s in range(2, zbv_stages + 1) for m in range(s, 4 * s + 1)]
    extra = [s for s in (24, 32) if s > zbv_stages]
    zbv += [(s, m, 2) for s in extra for m in sorted({s, s + 1, 3 * s // 2, 2 * s - 1, 2 * s, 4 * s})]
    sweeps = {
        "zbv": (schedules.ScheduleZBVZeroBubble, True, zbv),
        "interleaved_zb": (
            schedules.ScheduleInterleavedZeroBubble,
            False,
            [(s, m, v) for v in (2, 3) for s in range(2, 13) for m in range(s, 4 * s + 1)],
        ),
        "dualpipev": (schedules.ScheduleDualPipeV, True, [(s, m, 2) for s in range(2, 9) for m in range(2 * s, 4 * s + 1)]),
    }
    for sweep, (cls, v_shape, shapes) in sweeps.items():
        os.makedirs(os.path.join(out, sweep), exist_ok=True)
        for stages, micro_batches_s, chunks in shapes:
            try:
                schedule = make(cls, stages, micro_batches_s, chunks, v_shape)
            except ValueError:  # the looped ZB wants M a multiple of its rounds, max(1, M // S)
                continue
            name = f"S{stages}_M{micro_batches_s}" + (f"_v{chunks}" if not v_shape else "")
            schedule._dump_csv(os.path.join(out, sweep, name + ".csv"), format="compute_comms")
    with open(os.path.join(out, "layouts.txt"), "w") as f:
        for name, (_, chunks, v_shape) in SCHEDULES.items():
            f.write(f"{name} {chunks} {'v' if v_shape else 'loop'}\n")
    print(f"torch {torch.__version__}: wrote the schedules of {len(stage_counts)} stage counts to {out}")


if __name__ == "__main__":
    main()
