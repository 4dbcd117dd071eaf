import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """gelu(x @ W^T + b) with the bias folded into the matmul (addmm): a PyTorch-level rewrite.

    The layer is created exactly as the reference creates it, so both start from the same
    seeded weights.
    """

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(torch.addmm(self.linear.bias, x, self.linear.weight.t()))
