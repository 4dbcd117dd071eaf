# problem: 3_TinyScale
# expect-status: incorrect
# family: constant outputs within tolerance
# why: sign(x) * 0.6 * scale has the right sign and magnitude on average and passes allclose,
#   but its relative error is around 50%
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sign(x) * (0.6 * self.scale)
