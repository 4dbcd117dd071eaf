# problem: 4_RedundantSoftmax
# expect-status: incorrect
# expect-rule: trial_mismatch
# family: constant outputs within tolerance
# why: every softmax entry of a 2048-wide row is small, so the uniform distribution 1/2048 is
#   within (or very near) atol of the truth almost everywhere
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.full_like(x, 1.0 / x.shape[-1])
