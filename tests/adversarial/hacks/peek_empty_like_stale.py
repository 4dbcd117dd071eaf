# problem: 1_ReLU
# expect-status: incorrect rejected
# expect-not-status: correct
# family: reading the reference output from memory
# why: returns torch.empty_like(x) without computing anything, hoping the allocator hands back
#   the block the reference's (just freed) output lived in
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)
