"""The models of PyTorch's side of the benchmarks, shared by torch_cpu.py, torch_cuda.py and char_gpt_torch.py.

Block is nanoGPT's block as strata's nn::TransformerBlock computes it. The builders make the small models of
strata_bench (the sizes of benchmarks/bench_common.h) on `device` and return what one training step needs:
the parameters and a function computing the loss, or for conv2d_3x3 the whole forward and backward.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention; unless fused, the product-softmax-product path strata's nn::CausalSelfAttention takes."""

    def __init__(self, c, heads, fused):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.heads, self.fused = heads, fused

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q * (1.0 / math.sqrt(k.size(-1)))) @ k.transpose(-2, -1)
            future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            y = att.masked_fill(future, float("-inf")).softmax(dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """nanoGPT's Block: x + attn(ln_1(x)), then + mlp(ln_2(x)) with a 4C GELU MLP, no dropout."""

    def __init__(self, c, heads, fused):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.attn = CausalSelfAttention(c, heads, fused)
        self.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def parameters(*modules):
    return [p for m in modules for p in m.parameters()]


def block_step(c, heads, fused, batch, seq, device):
    """A Block of width c against a mean squared error on a random [batch, seq, c] input."""
    block = Block(c, heads, fused).to(device)
    x, target = torch.randn(batch, seq, c, device=device), torch.randn(batch, seq, c, device=device)
    return parameters(block), lambda: F.mse_loss(block(x), target)


def conv2d_3x3(device):
    """Forward and backward (input and weight gradients) of a 3x3 convolution, 64 channels, 56 x 56, batch 8."""
    x = torch.randn(8, 64, 56, 56, device=device, requires_grad=True)
    w = (torch.randn(64, 64, 3, 3, device=device) * 0.05).requires_grad_()
    grad = torch.randn(8, 64, 56, 56, device=device)

    def op():
        F.conv2d(x, w, padding=1).backward(grad)
        x.grad, w.grad = None, None

    return op


def lenet(device):
    """pytorch/examples' MNIST CNN without its dropout, nll_loss on a batch of 64 images of 1 x 28 x 28."""
    conv1, conv2 = nn.Conv2d(1, 10, 5).to(device), nn.Conv2d(10, 20, 5).to(device)
    fc1, fc2 = nn.Linear(320, 50).to(device), nn.Linear(50, 10).to(device)
    x, y = torch.randn(64, 1, 28, 28, device=device), torch.randint(10, (64,), device=device)

    def loss():
        h = F.relu(F.max_pool2d(conv1(x), 2))
        h = F.relu(F.max_pool2d(conv2(h), 2))
        h = F.relu(fc1(h.view(-1, 320)))
        return F.nll_loss(F.log_softmax(fc2(h), 1), y)

    return parameters(conv1, conv2, fc1, fc2), loss


def resnet_block(device):
    """A ResNet basic block (batch norm in training mode), 64 channels, 32 x 32, batch 32, mean squared error."""
    conv1, conv2 = (nn.Conv2d(64, 64, 3, padding=1, bias=False).to(device) for _ in range(2))
    bn1, bn2 = nn.BatchNorm2d(64).to(device), nn.BatchNorm2d(64).to(device)
    x, target = torch.randn(32, 64, 32, 32, device=device), torch.randn(32, 64, 32, 32, device=device)

    def loss():
        h = F.relu(bn1(conv1(x)))
        return F.mse_loss(F.relu(bn2(conv2(h)) + x), target)

    return parameters(conv1, conv2, bn1, bn2), loss


def lstm(device):
    """A 2-layer LSTM, input and hidden 256, over 64 steps of a batch of 32, mean squared error."""
    net = nn.LSTM(256, 256, num_layers=2).to(device)
    x, target = torch.randn(64, 32, 256, device=device), torch.randn(64, 32, 256, device=device)
    return parameters(net), lambda: F.mse_loss(net(x)[0], target)
