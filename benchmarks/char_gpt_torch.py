#!/usr/bin/env python3
"""examples/char_gpt's model, data and optimizer in eager PyTorch, for its tokens/s next to strata's.

    char_gpt_torch.py [--steps N] [--threads N] [--batch-size B] [--block T] [--embed C] [--heads H]
                      [--layers N] [--lr LR] [--data FILE] [--compile] [--autocast bfloat16|float16]

The model is nanoGPT's (what strata's nn::TransformerBlock mirrors): token and learned position embeddings,
pre-norm blocks (fused q/k/v projection, causal attention through F.scaled_dot_product_attention, a GELU MLP
of 4C), a final LayerNorm and an LM head tied to the token embedding; AdamW with weight decay 0.1 and
warmup-cosine learning rates, random windows of the King James Bible (Debian's bible-kjv). Prints the
losses every 50 steps and, last, `tokens_per_s=<value>` over the steps after the first 5 (warm-up, which
also holds torch.compile's compilation with --compile: the model's forward and backward through Inductor's C++
kernels; the optimizer stays eager). --autocast runs the forward and the loss under torch.autocast("cpu"), as
char_gpt's --autocast does, with a GradScaler for float16.
"""
import argparse
import math
import subprocess
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_models import Block


class GPT(nn.Module):
    def __init__(self, vocab, block, embed, heads, layers):
        super().__init__()
        self.tok = nn.Embedding(vocab, embed)
        nn.init.normal_(self.tok.weight, 0, 0.02)
        self.pos = nn.Parameter(torch.randn(block, embed) * 0.02)
        self.blocks = nn.Sequential(*[Block(embed, heads, fused=True) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(embed)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        return self.ln_f(self.blocks(x)) @ self.tok.weight.t()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--embed", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--data", default="")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--autocast", choices=["bfloat16", "float16"])
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.data:
        with open(a.data, "rb") as f:
            text = f.read()
    else:
        text = subprocess.run(["bible", "-l80", "Gen1:1-Rev22:21"], check=True, capture_output=True).stdout
    vocab = sorted(set(text))
    lut = torch.zeros(256, dtype=torch.long)
    for i, c in enumerate(vocab):
        lut[c] = i
    ids = lut[torch.frombuffer(bytearray(text), dtype=torch.uint8).long()]
    train = ids[: len(ids) * 9 // 10]

    model = GPT(len(vocab), a.block, a.embed, a.heads, a.layers)
    forward = torch.compile(model) if a.compile else model
    decay = [q for q in model.parameters() if q.dim() >= 2]
    rest = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=a.lr)
    warmup = min(100, a.steps // 10)

    def lr_at(step):
        if step < warmup:
            return a.lr * (step + 1) / warmup
        return a.lr * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, a.steps - warmup)))

    low = getattr(torch, a.autocast) if a.autocast else None
    scaler = torch.amp.GradScaler("cpu", enabled=a.autocast == "float16")
    gen = torch.Generator().manual_seed(3)
    start = None
    for step in range(a.steps):
        if step == 5:
            start = time.perf_counter()
        starts = torch.randint(0, len(train) - a.block - 1, (a.batch_size,), generator=gen)
        rows = torch.stack([train[s : s + a.block + 1] for s in starts.tolist()])
        x, y = rows[:, :-1], rows[:, 1:]
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        with torch.autocast("cpu", dtype=low, enabled=low is not None):
            loss = F.cross_entropy(forward(x).reshape(-1, len(vocab)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if (step + 1) % 50 == 0:
            print(f"step {step + 1}: train loss {loss.item():.4f}", flush=True)
    seconds = time.perf_counter() - start
    print(f"torch {torch.__version__}, {a.threads} thread(s){', torch.compile' if a.compile else ''}"
          f"{', autocast ' + a.autocast if a.autocast else ''}")
    print(f"tokens_per_s={(a.steps - 5) * a.batch_size * a.block / seconds:.1f}")


if __name__ == "__main__":
    main()
