import torch
import torch.nn as nn

# Each row's mean of x^2 over 131072 standard normal values is 1 give or take 0.004: a tensor of
# ones is within atol of every answer and within 0.4 % of it (relative L2).
rows = 64
columns = 131072


class Model(nn.Module):
    """Per-row mean of x^2: shape (rows,)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x * x, dim=1)


def get_inputs():
    return [torch.randn(rows, columns)]


def get_init_inputs():
    return []
