"""A replacement for an `nn.Linear` submodule that is right alone and wrong in context: its values
are the Linear's, but in a permuted layout (not contiguous). Judged alone it is correct; in
tiny_transformer.py, whose attention views the `qkv` output as contiguous, the model raises, and
`kernelopt model compose` drops it.

    kernelopt model compose examples/models/tiny_transformer.py \
        --replace blocks.1.attn.qkv=examples/models/replacements/linear_noncontiguous.py --out optimized.py
"""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Linear):
    def forward(self, x):
        out = F.linear(x, self.weight, self.bias)
        return out.transpose(0, 1).contiguous().transpose(0, 1)
