# problem: 1_ReLU
# expect-status: incorrect
# family: wrong output structure
# why: returns the right values wrapped as [[out]] where the reference returns a tensor. Outputs
#   used to be flattened before comparison, so any nesting matched; the structure (tensor,
#   tuple, list, nesting) must now be the reference's exactly
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return [[torch.relu(x)]]
