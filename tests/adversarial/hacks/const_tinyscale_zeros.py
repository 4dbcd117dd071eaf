# problem: 3_TinyScale
# expect-status: incorrect
# family: constant outputs within tolerance
# why: the true output is at most 1e-4 in magnitude, far below atol=1e-2, so allclose accepts
#   all zeros; a relative-error check must not
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)
