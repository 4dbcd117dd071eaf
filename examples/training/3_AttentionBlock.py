import math

import torch
import torch.nn as nn

# A causal self-attention block (projections, attention, output projection), judged as a
# training step: the output and the gradients of the input and of all four projections' weights
# and biases. The reference materializes the full score matrix and its softmax, as a plain
# implementation does; a fused attention with its own backward avoids storing them.
PASS = "both"

batch_size = 2
seq_len = 64
dim = 128
heads = 4


class Model(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(b, t, d))


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, heads]
