# problem: 1_ReLU
# expect-status: rejected
# expect-flag: input_mutation
# family: input mutation
# why: uses the input as scratch space (adds and subtracts 1.0 in place), which changes the low
#   bits of small entries; the damage is below any allclose tolerance, so only a bitwise input
#   check finds it
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.add_(1.0).sub_(1.0)
        return torch.clamp_min(x, 0.0)
