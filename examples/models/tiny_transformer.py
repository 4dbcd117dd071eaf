"""A small pre-norm transformer encoder (written for kernelopt's `kernelopt model` examples).

Two blocks of multi-head self-attention and a GELU MLP, each behind a LayerNorm and a residual.
The attention is written the straightforward way, one head at a time, the way a first version
of a model often is: it is the hot spot `kernelopt model profile` finds first.
"""

import math

import torch
import torch.nn as nn

batch_size = 4
seq_len = 64
dim = 128
heads = 4
depth = 2


class SelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        qkv = self.qkv(x).view(b * t, 3 * d)   # one row per token: its q, k and v
        q, k, v = (part.view(b, t, d) for part in qkv.chunk(3, dim=-1))
        size = d // self.heads
        outs = []
        for h in range(self.heads):
            qh = q[..., h * size:(h + 1) * size]
            kh = k[..., h * size:(h + 1) * size]
            vh = v[..., h * size:(h + 1) * size]
            scores = qh @ kh.transpose(-2, -1) / math.sqrt(size)
            outs.append(torch.softmax(scores, dim=-1) @ vh)
        return self.proj(torch.cat(outs, dim=-1))


class MLP(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, 4 * dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, dim, heads, depth):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, heads, depth]
