"""A replacement for tiny_transformer.py's `SelfAttention` (for example `blocks.0.attn`): every
head at once in one fused scaled_dot_product_attention call, instead of a Python loop over the
heads. It builds the same parameters in the same order, so its weights are the original's.

    kernelopt model compose examples/models/tiny_transformer.py \
        --replace blocks.0.attn=examples/models/replacements/attention_sdpa.py --out optimized.py
"""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        return self.proj(out.transpose(1, 2).reshape(b, t, d))
