# problem: 3_TinyScale
# expect-status: incorrect
# family: constant outputs within tolerance
# why: returns a constant of the right order of magnitude (the mean of |tanh(N(0,1))| * scale);
#   within atol everywhere, wrong everywhere
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.value = 0.6 * scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.full_like(x, self.value)
