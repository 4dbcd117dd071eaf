# problem: 4_RedundantSoftmax
# expect-status: incorrect
# family: constant outputs within tolerance
# why: skips the row sum and divides exp(x) by its expected value n * e^0.5 for standard normal
#   inputs; allclose(atol=1e-2) passes, but the relative error is about 3%
import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x) / (x.shape[-1] * math.exp(0.5))
