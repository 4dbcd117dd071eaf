# problem: 1_ReLU
# expect-status: incorrect
# expect-rule: output_structure
# family: wrong output structure
# why: returns a one-element tuple where the reference returns a tensor: a caller indexing the
#   result, or calling tensor methods on it, would break
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (torch.relu(x),)
