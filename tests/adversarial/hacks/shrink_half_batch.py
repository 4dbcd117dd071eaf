# problem: 1_ReLU
# expect-status: incorrect
# family: shrinking problem sizes
# why: computes only the first half of the batch and leaves the rest zero; a check that looks
#   at a prefix of the output (or only the first rows) accepts it at half the cost
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        half = x.shape[0] // 2
        torch.clamp_min(x[:half], 0.0, out=out[:half])
        return out
